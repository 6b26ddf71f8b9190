"""An example third-party diffugrpo masker package (see ``stratified.py``)."""
