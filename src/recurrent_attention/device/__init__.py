"""GPU windows: a kit that carries what a bare GPU machine lacks, a runner that spends a wall budget on
the next chunk of the queue there, and the import that turns its archive into committed runs.

``chunks`` (the queue), ``kit`` (``make device-kit``), ``runner`` (runs on the GPU machine with the
standard library alone until it has installed the kit's wheels), ``budget`` (which job fits what is
left), ``importer`` (``make device-import``). ``docs/device.md`` is the guide.
"""
