"""Importing hvdlite.spark or hvdlite.ray where its engine is not installed says which extra to install."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module, extra", [("hvdlite.spark", "spark"), ("hvdlite.ray", "ray")])
def test_importing_an_engine_module_without_its_engine_says_what_to_install(module, extra):
    engine = "pyspark" if extra == "spark" else "ray"
    # The engine hidden from the import system, as in an environment without it.
    code = f"import sys; sys.modules[{engine!r}] = None; import {module}"
    result = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert f"ImportError: {module} needs" in result.stdout and f"pip install 'hvdlite[{extra}]'" in result.stdout, \
        result.stdout[-2000:]
