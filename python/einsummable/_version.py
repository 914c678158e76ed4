"""The package's version: the same as AC_INIT's in configure.ac (a test
checks that they agree)."""

__version__ = "0.1.0"
