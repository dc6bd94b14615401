"""Feature maps phi for attention computed as phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1).

Laid out like the feature maps of the xformers attention zoo
(``xformers/components/attention/feature_maps``), which its Performer-style mechanisms share:

* :mod:`~vitattn.attention.feature_maps.base`: what a feature map supplies
  (:class:`~vitattn.attention.feature_maps.base.FeatureMap`: phi written with autograd, and
  :class:`~vitattn.attention.feature_maps.base.TileFeatures`: phi one tile at a time, with its
  derivative), and the attention written with autograd on top of phi;
* :mod:`~vitattn.attention.feature_maps.chunked`: the chunked kernel, written once for every map:
  tiles of keys and queries, an online maximum, a hand-written backward;
* :mod:`~vitattn.attention.feature_maps.favor`: positive orthogonal random features, FAVOR+
  (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021);
* :mod:`~vitattn.attention.feature_maps.fourier`: random Fourier features (Rahimi & Recht,
  "Random Features for Large-Scale Kernel Machines", NeurIPS 2007) as random feature attention
  uses them (Peng et al., "Random Feature Attention", ICLR 2021).

The mechanisms (``performer``, ``random_feature``) stay one level up, one module each, and
register there; this package registers nothing.
"""
