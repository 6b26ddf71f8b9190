"""An example third-party diffugrpo reward package (see ``rewards.py``)."""
