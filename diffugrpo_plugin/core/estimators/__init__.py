"""Likelihood estimators for RL on diffusion LMs beside coupled-GRPO: their maskers and their plain-torch math.

Each estimator is a masker (how a completion is noised and its per-token estimate combined, registered through
the ``diffugrpo_maskers`` hook like any plugin's) plus, where its objective differs from PPO's, an advantage and a
policy loss that :mod:`diffugrpo_plugin.integration.estimators` registers in verl's registries:

* :mod:`.wd1`: wd1's ratio-free weighted likelihood with its group softmax weights (d1's masker);
* :mod:`.spg`: SPG's sandwiched bounds, an ELBO for positive advantages and a mixture with an upper bound
  (EUBO) for the others, over block-wise masked views;
* :mod:`.ebpo`: EBPO's per-block stratified masking and a sequence-level clipped ratio.

Plain torch; no verl.
"""
