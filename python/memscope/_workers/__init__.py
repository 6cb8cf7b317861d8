"""The processes the ``memscope`` binary drives, not an API: the torch engine (``engine``), the
estimator's trace (``trace``), the op timer (``optime``), the roofs (``peaks``) and the link
between ranks (``link``), each run as ``python -m memscope._workers.NAME`` with a request on
stdin. Below them: ``protocol`` (the request, the answer, a rank's place in the job),
``parallel`` (every plan: DDP, FSDP2, TP, the mesh, the fake process group), ``inputs`` (token
batches, the KV cache's tensors), ``models`` (transformers' classes from memscope's configs,
fused AdamW), ``collectives`` (the collectives a step ran) and ``stop``."""
