"""Runs one of PyTorch's device-generic test files in this process and writes each test's result.

``python upstream_worker.py TEST_FILE RESULTS.jsonl OPTIONS.json``, started by ``upstream.py``
with the file's folder as its working directory. It imports the backend modules named in the
options (a backend torch does not autoload), then the test file; ``instantiate_device_type_tests``
in it makes a CPU class and a PrivateUse1 class of every device-generic test class. The classes
of one of the two devices run (the runner starts one process per device, so that neither side's
global state, such as a TORCH_WARN_ONCE already fired by the same CPU kernel, reaches the other),
test by test; each test's start and end are one JSON line, written at once, so that a crash or a
timeout still leaves every finished result and names the test it happened in (the runner then
starts the file again without the tests already done).
"""

import importlib
import json
import os
import re
import sys
import traceback
import unittest

import torch

# LITERALINCLUDE START: UPSTREAM_WORKER
# The device-generic classes: instantiate_device_type_tests names them after
# the device type (TestFooCPU, TestFooPRIVATEUSE1), or after the backend's name
# (TestFooEMU) once a PrivateUse1 class has set up and renamed the device type
# of the base class the later ones copy: test_indexing.py's NumpyTests.
def device_classes(backend: str) -> dict[str, str]:
    return {"CPU": "cpu", "PRIVATEUSE1": "privateuse1", backend.upper(): "privateuse1"}


def device_of(test: unittest.TestCase, backend: str) -> tuple[str, str] | None:
    """The device of a device-generic test and its class's suffix naming it."""
    name = type(test).__name__
    return next(((device, suffix) for suffix, device in device_classes(backend).items() if name.endswith(suffix)),
                None)


def generic_key(test: unittest.TestCase, device: str, suffix: str, backend: str) -> str:
    """The test's name on no device, shared by its CPU and its PrivateUse1 variant:
    TestFooCPU.test_bar_cpu_float32 and TestFooPRIVATEUSE1.test_bar_emu_float32 are
    both TestFoo.test_bar_float32 (the device goes between the name and the dtypes)."""
    cls = type(test).__name__
    token = "_" + ("cpu" if device == "cpu" else backend)
    method = test._testMethodName
    at = method.rfind(token)
    while at >= 0 and not (at + len(token) == len(method) or method[at + len(token)] == "_"):
        at = method.rfind(token, 0, at)
    if at >= 0:
        method = method[:at] + method[at + len(token):]
    return f"{cls[: -len(suffix)]}.{method}"


# What a test's name ends in for each of its dtypes (_float32, _complex64_float8_e4m3fn...):
# the longest names first, so that float8_e4m3fnuz is not read as float8_e4m3fn + "uz".
DTYPE_SUFFIXES = re.compile("(_({}))+".format("|".join(sorted(
    {str(d).removeprefix("torch.") for d in vars(torch).values() if isinstance(d, torch.dtype)}, key=len, reverse=True))))


def skip_reason(key: str, method: str, backend: str, options: dict) -> str | None:
    """Why the skip file skips this PrivateUse1 test, if it does: by name (an entry without
    the dtypes names every dtype's variant, not other tests its name begins: test_svd is not
    test_svd_lowrank), or by the OpInfo operator in its name (test_<what>_<op>_<device>_<dtype>)."""
    for name, reason in options.get("skipped_testcases", {}).items():
        if key == name or (key.startswith(name) and DTYPE_SUFFIXES.fullmatch(key[len(name):])):
            return reason
    for op, reason in options.get("op_skips", {}).items():
        if f"_{op.replace('.', '_')}_{backend}" in method:
            return reason
    return None


def first_line(err) -> str:
    """The exception's type and the first line of its message, as a report shows it."""
    kind, value, _ = err
    message = str(value).strip().splitlines()
    return f"{kind.__name__}: {message[0] if message else ''}".strip()


class Recorder(unittest.TestResult):
    """Writes one line per test as it ends; a test with failing subtests fails once."""

    def __init__(self, out, names):
        super().__init__()
        self.out, self.names, self.failed = out, names, set()

    def write(self, test, status, message=None):
        self.out.write(json.dumps({"event": "end", **self.names[test.id()], "status": status,
                                   "message": message}) + "\n")
        self.out.flush()

    def startTest(self, test):
        super().startTest(test)
        self.out.write(json.dumps({"event": "start", **self.names[test.id()]}) + "\n")
        self.out.flush()

    def addSuccess(self, test):
        if test.id() not in self.failed:
            self.write(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.failed.add(test.id())
        self.write(test, "failed", first_line(err))

    def addError(self, test, err):
        super().addError(test, err)
        self.failed.add(test.id())
        self.write(test, "failed", first_line(err))

    def addSubTest(self, test, subtest, err):
        if err is not None and test.id() not in self.failed:
            self.failed.add(test.id())
            self.write(test, "failed", first_line(err))

    def addSkip(self, test, reason):
        self.write(test, "skipped", str(reason).strip().splitlines()[0] if str(reason).strip() else "")

    def addExpectedFailure(self, test, err):
        self.write(test, "expected failure", first_line(err))

    def addUnexpectedSuccess(self, test):
        self.write(test, "failed", "unexpected success")


def run(path: str, results: str, options: dict) -> None:
    for module in options.get("imports", []):
        importlib.import_module(module)
    import torch
    from torch.testing._internal.common_device_type import PrivateUse1TestBase

    # Tests PyTorch restricts to native device types (onlyCUDA, onlyNativeDeviceTypes...)
    # run on the PrivateUse1 device too; the runner reports them apart.
    PrivateUse1TestBase.bypass_device_restrictions = options.get("bypass", False)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    sys.argv = [path]
    with open(results, "w") as out:
        backend = torch._C._get_privateuse1_backend_name()
        out.write(json.dumps({"event": "backend", "name": backend}) + "\n")
        try:
            module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
        except BaseException:  # noqa: BLE001 - any failure to import is reported, not raised
            out.write(json.dumps({"event": "import error", "message": traceback.format_exc().strip().splitlines()[-1]})
                      + "\n")
            return
        only, exclude = set(options.get("only", [])), set(options.get("exclude", []))
        names, tests = {}, []
        for test in flatten(unittest.TestLoader().loadTestsFromModule(module)):
            device, suffix = device_of(test, backend) or (None, "")
            name = f"{type(test).__name__}.{test._testMethodName}"
            if device != options["device"]:
                continue
            key = generic_key(test, device, suffix, backend)
            if name in exclude or (only and key not in only):
                continue
            names[test.id()] = {"device": device, "key": key, "name": name}
            tests.append(test)
        out.write(json.dumps({"event": "collected", "tests": [names[t.id()] for t in tests]}) + "\n")
        out.flush()
        recorder = Recorder(out, names)
        for test in tests:
            info = names[test.id()]
            reason = info["device"] != "cpu" and skip_reason(info["key"], test._testMethodName, backend, options)
            if reason:
                recorder.write(test, "skip file", reason)
            else:
                test.run(recorder)
# LITERALINCLUDE END: UPSTREAM_WORKER


def flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


if __name__ == "__main__":
    with open(sys.argv[3]) as f:
        run(sys.argv[1], sys.argv[2], json.load(f))
