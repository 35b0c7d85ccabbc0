"""Reference tests: our engine against Hugging Face transformers and mlx-lm.

They need torch, transformers (and mlx-lm for test_mlx_lm.py), which the everyday test
run does not install, so they skip there; `nox -s reference` installs and runs them."""
