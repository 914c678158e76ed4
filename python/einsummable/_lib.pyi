# Type hints of einsummable._lib (internal: the ctypes declarations); only
# what the public modules use.
from typing import Any, List

from ._errors import EinError as EinError

class _Lib:
    path: str
    missing: List[str]
    def __getattr__(self, name: str) -> Any: ...

lib: _Lib

def bin_dirs() -> List[str]: ...
def __getattr__(name: str) -> Any: ...
