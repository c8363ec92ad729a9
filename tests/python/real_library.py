"""Runs the callback test against one real library (transformers or lightning): exit 77, which
ctest reports as Skipped (never passed), when the library is not installed here."""

import importlib
import sys
import unittest

NAMES = {"transformers": (["transformers"], "test_transformers_trainer_callback"),
         "lightning": (["lightning.pytorch", "pytorch_lightning"], "test_lightning_callback")}

library = sys.argv[1]
modules, test = NAMES[library]
for m in modules:
    try:
        importlib.import_module(m)
        break
    except ImportError:
        continue
else:
    print(f"SKIPPED: {library} is not installed (not packaged by Debian); the callback was tested on stand-ins only")
    sys.exit(77)
suite = unittest.defaultTestLoader.loadTestsFromName(f"test_integrations.RealLibrariesTest.{test}")
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() and not result.skipped else 1)
