// The examples' library as a Python module (torch_emu_examples._C): importing
// it loads the library, and loading runs the other files' static registrations.
#include <Python.h>

PyMODINIT_FUNC PyInit__C() {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_emu_examples._C",
                               "The C++ operator registration examples (registered when loaded).", -1, nullptr};
  return PyModule_Create(&module);
}
