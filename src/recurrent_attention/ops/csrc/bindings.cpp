#include "native.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.def("cumulative_attention", &recurrent_attention::cumulative_attention,
        "The cumulative prefix-attention kernel of one chunk: (out, m, u, w, late or None)", py::arg("scores"),
        py::arg("values"), py::arg("carry_m"), py::arg("carry_u"), py::arg("carry_w"), py::arg("limit"));
  m.def("value_score_projection", &recurrent_attention::value_score_projection,
        "Aaren's values-and-scores projection: (F, f or None) with values then scores x F^T + f",
        py::arg("query"), py::arg("qkv_weight"), py::arg("qkv_bias"), py::arg("n_heads"));
  py::class_<recurrent_attention::StackStepper>(
      m, "StackStepper", "A layer stack's eval step through every block (Aaren or linear attention), on laid-out weights")
      .def(py::init<const std::string&, std::vector<torch::Tensor>, std::vector<double>, bool, bool,
                    std::optional<torch::Tensor>, std::optional<torch::Tensor>, double, int64_t, int64_t, double,
                    std::vector<torch::Tensor>, int64_t, const std::string&>(),
           py::arg("mixer"), py::arg("weights"), py::arg("eps"), py::arg("norm_first"), py::arg("gelu"),
           py::arg("final_weight"), py::arg("final_bias"), py::arg("final_eps"), py::arg("heads"), py::arg("d_head"),
           py::arg("mixer_eps"), py::arg("sources"), py::arg("raw_rows"), py::arg("weight_format") = "float32")
      .def(
          "try_step",
          // The state goes in as the model holds it (a list of one tuple of tensors per block) and comes
          // back as a list of `state_type`s: at one token, flattening and rebuilding it in Python cost
          // as much as a tenth of the step.
          [](const recurrent_attention::StackStepper& stepper, const torch::Tensor& token, const py::sequence& state,
             const py::object& state_type) -> py::object {
            std::vector<torch::Tensor> flat;
            for (const py::handle layer : state)
              for (const py::handle part : layer) flat.push_back(part.cast<torch::Tensor>());
            auto stepped = stepper.try_step(token, flat);
            if (!stepped.has_value()) return py::none();
            const auto& [y, next] = *stepped;
            const size_t parts = state.size() == 0 ? 0 : next.size() / state.size();
            py::list layers(state.size());
            for (size_t layer = 0; layer < state.size(); ++layer) {
              py::tuple args(parts);
              for (size_t p = 0; p < parts; ++p) args[p] = py::cast(next[layer * parts + p]);
              layers[layer] = state_type(*args);
            }
            return py::make_tuple(y, layers);
          },
          "(y_t, the new state: a list of state_type), or None where the compiled step does not apply",
          py::arg("token"), py::arg("state"), py::arg("state_type"));
}
