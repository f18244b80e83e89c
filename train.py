"""Train and test one configuration: ``python train.py model=aaren task=tsf/etth1``. See ``--help``."""

from recurrent_attention.train import main

if __name__ == "__main__":
    main()
