"""One guarded doorway for every per-device NVML call.

NVML answers "not supported" for whole families of queries depending on the GPU
model, the driver, MIG/vGPU mode and the caller's permissions, and a GPU can
fall off the bus at any moment. Scattering ``try/except`` over the probe would
make those policies inconsistent, so every per-device call goes through
:meth:`DeviceGuard.call`, which applies them all in one place:

* ``NotSupported`` / ``NoPermission`` / ``FunctionNotFound`` blank the field
  (``None``), record its label, and that label is never asked for again on this
  device (as nvitop's libnvml and btop's "supported" flags do): the answer will
  not change while the driver stays loaded, and each refused call still costs a
  trip into the driver.
* ``GpuIsLost`` (or ``Unknown`` from a device that has answered before, which is
  how a dying GPU often shows itself) raises :class:`DeviceLostError`, so the
  caller can mark that one GPU lost and keep reading the others.
* Any other :class:`pynvml.NVMLError` (timeouts, busy driver...) blanks the
  field for this tick only.

The ``except`` clauses name the real :mod:`pynvml` classes; the test fake raises
those same classes, so the tests exercise exactly this code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pynvml

#: Errors that say "this device/driver/user cannot answer this question, ever".
UNSUPPORTED_ERRORS: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_FunctionNotFound,
)

#: Errors that mean "this entry point does not exist here; try the older one".
#: ``NVMLLibraryMismatchError`` is what an unversioned wrapper raises when the
#: driver lacks the versioned symbol behind it; it is not an ``NVMLError``.
_MISSING_FUNCTION_ERRORS: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_FunctionNotFound,
    getattr(pynvml, "NVMLLibraryMismatchError", pynvml.NVMLError_FunctionNotFound),
)


class DeviceLostError(Exception):
    """Raised by :meth:`DeviceGuard.call` when its GPU has stopped answering."""


@dataclass
class DeviceGuard:
    """Per-device memory of what NVML refused, and the gate every call goes through.

    ``labels`` name the sample fields a call fills (``"power_w"``, ...), so the
    refusals recorded here are what ``GpuDevice.unsupported`` reports.
    """

    nvml: ModuleType
    index: int
    handle: Any = None
    #: Insertion-ordered set of labels the driver refused for good.
    unsupported: dict[str, None] = field(default_factory=dict)
    #: Whether any call on this device has succeeded (turns ``Unknown`` into "lost").
    ever_ok: bool = False
    #: For calls with fallbacks: the entry point that worked, keyed by labels.
    _resolved: dict[tuple[str, ...], Callable[..., Any]] = field(default_factory=dict)

    def is_unsupported(self, label: str) -> bool:
        return label in self.unsupported

    def mark_unsupported(self, *labels: str) -> None:
        for label in labels:
            self.unsupported.setdefault(label, None)

    def call(
        self,
        labels: tuple[str, ...],
        fn_names: tuple[str, ...],
        *args: Any,
        not_found: Any = None,
        answers: bool = True,
    ) -> Any:
        """Call the first available of ``fn_names`` with ``args``; ``None`` if blank.

        ``fn_names`` lists newer entry points first; an older one is only used
        when the newer one is missing from the binding or the driver. A
        ``NotFound`` answer returns ``not_found`` (for queries where "nothing
        new" is a normal answer rather than a failure). ``answers=False`` is for
        calls the driver serves from its own tables (the handle lookup), whose
        success does not show that the GPU itself is responding.
        """
        if any(label in self.unsupported for label in labels):
            return None
        fn = self._resolved.get(labels)
        if fn is not None:
            return self._invoke(labels, fn, args, not_found, answers)
        for name in fn_names:
            candidate = getattr(self.nvml, name, None)
            if candidate is None:
                continue
            try:
                result = self._invoke(labels, candidate, args, not_found, answers, fallback=True)
            except _FallThroughError:
                continue
            self._resolved[labels] = candidate
            return result
        self.mark_unsupported(*labels)
        return None

    def _invoke(
        self,
        labels: tuple[str, ...],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        not_found: Any,
        answers: bool,
        fallback: bool = False,
    ) -> Any:
        try:
            result = fn(*args)
        except _MISSING_FUNCTION_ERRORS as exc:
            if fallback:
                raise _FallThroughError from exc
            self.mark_unsupported(*labels)
            return None
        except pynvml.NVMLError_GpuIsLost as exc:
            raise DeviceLostError(str(exc)) from exc
        except UNSUPPORTED_ERRORS:
            self.mark_unsupported(*labels)
            return None
        except pynvml.NVMLError_NotFound:
            return not_found
        except pynvml.NVMLError_Unknown as exc:
            if self.ever_ok:
                raise DeviceLostError(str(exc)) from exc
            return None
        except pynvml.NVMLError:
            return None
        self.ever_ok = self.ever_ok or answers
        return result


class _FallThroughError(Exception):
    """Internal: this entry point is missing, try the next one in the chain."""
