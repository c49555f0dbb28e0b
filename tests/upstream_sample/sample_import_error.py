"""A test file written for another version of torch: it imports a name the installed one lacks."""

from torch.testing._internal.common_utils import a_name_this_torch_does_not_have  # noqa: F401
