"""Runtime errors of ``torch.emu``, as ``torch.cuda`` names them: ``EmuError``
(``CudaError``), ``check_error``, ``emuStatus`` (``cudaStatus``) and
``DeferredEmuCallError`` (``DeferredCudaCallError``)."""

from .. import _C

__all__ = ["EmuError", "DeferredEmuCallError", "emuStatus", "check_error"]


class emuStatus:
    """Result codes of the emu runtime API (``emuError_t``) that callers test for."""

    SUCCESS: int = 0
    ERROR_NOT_READY: int = 7


class EmuError(RuntimeError):
    """A failed emu runtime call: the runtime's description and the code."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"{_C._error_string(code)} ({code})")


def check_error(res: int) -> None:
    """Raises :class:`EmuError` unless ``res`` (an ``emuError_t``) is success."""
    if res != emuStatus.SUCCESS:
        raise EmuError(res)


class DeferredEmuCallError(Exception):
    """A call queued before initialisation (``torch.emu.manual_seed``...)
    failed when emu started; the message says where it was made."""
