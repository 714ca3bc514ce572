"""The one build step pyproject.toml cannot declare: the wheel also carries
``servegym-gymnasium.pth`` at its root, which registers the environments with Gymnasium when
Gymnasium is imported (see ``_servegym_register.py``). Everything else is in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "servegym-gymnasium.pth"


class BuildPyWithPth(build_py):
    """``build_py`` that also copies :data:`PTH` to the root of the build directory."""

    def run(self) -> None:
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH))


setup(cmdclass={"build_py": BuildPyWithPth})
