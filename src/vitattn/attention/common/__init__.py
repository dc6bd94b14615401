"""What the attention mechanisms share; registers no mechanism.

* :mod:`~vitattn.attention.common.base`: the kernel interface and the registry;
* :mod:`~vitattn.attention.common.multihead`: the multi-head wrapper that owns the projections;
* :mod:`~vitattn.attention.common.knobs`: checking a mechanism's settings, one message style;
* :mod:`~vitattn.attention.common.tiling`: tiles for the chunked feature-map kernels;
* :mod:`~vitattn.attention.common.autotune`: ``impl=auto``, the faster implementation per device
  and shape;
* :mod:`~vitattn.attention.common.blocks`: gathering and masking for the sparse kernels;
* :mod:`~vitattn.attention.common.fusable`: ``impl`` of the mechanisms with a fused path
  (:mod:`vitattn.attention.fused`).
"""
