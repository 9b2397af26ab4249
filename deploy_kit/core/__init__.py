"""The bottom layer: pure leaves every other layer may import (the compatibility table, model
geometry, errors and exit codes, the JSON envelope, the words read in other programs' output)."""
