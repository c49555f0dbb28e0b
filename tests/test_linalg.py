"""Linear algebra on emu: CPU's LAPACK kernels through the fallback, and LU
without pivoting (csrc/aten/kernels/EmuLinalg.cpp), which CUDA has and CPU has not."""

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]


def tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype in (torch.float32, torch.complex64) else {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 3), (2, 3, 5), (0, 3, 3), (4, 0), (1, 1)])
def test_lu_without_pivoting_reconstructs_the_matrix(dtype, shape, baseline_memory):
    torch.manual_seed(0)
    # Diagonally dominant: every leading minor is nonsingular, so no pivot is zero.
    A = torch.randn(shape, dtype=dtype)
    k = min(shape[-2:])
    A[..., :k, :k] += 4 * torch.eye(k, dtype=dtype)
    LU, pivots, info = torch.linalg.lu_factor_ex(A.to("emu"), pivot=False)
    assert LU.device.type == "emu" and LU.shape == A.shape and LU.mT.is_contiguous()  # LAPACK's layout
    assert torch.equal(pivots.cpu(), torch.arange(1, k + 1, dtype=torch.int32).expand(shape[:-2] + (k,)))
    assert not info.cpu().any()
    P, L, U = torch.linalg.lu(A.to("emu"), pivot=False)
    assert P.shape == (0,)
    torch.testing.assert_close((L @ U).cpu(), A, **tol(dtype))
    P2, L2, U2 = torch.lu_unpack(LU, pivots, unpack_pivots=False)
    torch.testing.assert_close(L2.cpu(), L.cpu())
    torch.testing.assert_close(U2.cpu(), U.cpu())
    if shape[-1] == shape[-2] and k:
        B = torch.randn(shape[:-1] + (2,), dtype=dtype)
        X = torch.linalg.lu_solve(LU, pivots, B.to("emu"))
        torch.testing.assert_close((A.to("emu") @ X).cpu(), B, **tol(dtype))
    del LU, pivots, info, P, L, U, P2, L2, U2


def test_lu_with_pivoting_is_still_cpus(baseline_memory):
    A = torch.randn(2, 4, 4, dtype=torch.float64)
    LU, pivots = torch.linalg.lu_factor(A.to("emu"))
    expected_LU, expected_pivots = torch.linalg.lu_factor(A)
    assert torch.equal(LU.cpu(), expected_LU) and torch.equal(pivots.cpu(), expected_pivots)
    del LU, pivots


def test_a_zero_pivot_is_reported_as_lapack_does(baseline_memory):
    A = torch.zeros(2, 3, 3, device="emu")
    A[:, 0, 0] = 1
    LU, _, info = torch.linalg.lu_factor_ex(A, pivot=False)
    assert info.tolist() == [2, 2]  # the first zero on U's diagonal, 1-based
    assert torch.isfinite(LU).all()  # its column is left unscaled, not divided by zero
    with pytest.raises(RuntimeError, match=r"\(Batch element 0\): U\[2,2\] is zero"):
        torch.linalg.lu_factor(A, pivot=False)
    with pytest.raises(RuntimeError, match=r"U\[2,2\] is zero"):
        torch.linalg.lu_factor_ex(A, pivot=False, check_errors=True)
    del A, LU, info


def test_lu_without_pivoting_out_and_autograd(baseline_memory):
    A = torch.randn(3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    outs = [torch.empty(0, device="emu", dtype=torch.float64), torch.empty(0, device="emu", dtype=torch.int32),
            torch.empty(0, device="emu", dtype=torch.int32)]
    result = torch.linalg.lu_factor_ex(A.to("emu"), pivot=False, out=outs)
    assert all(r is o for r, o in zip(result, outs))
    plu = [torch.empty(0, device="emu", dtype=torch.float64) for _ in range(3)]
    torch.linalg.lu(A.to("emu"), pivot=False, out=plu)
    torch.testing.assert_close((plu[1] @ plu[2]).cpu(), A)
    # The derivative is autograd's formula for linalg_lu_factor_ex, above the kernel.
    x = A.to("emu").requires_grad_()
    torch.autograd.gradcheck(lambda t: torch.linalg.lu_factor(t, pivot=False)[0], (x,))
    del outs, result, plu, x


def test_lu_without_pivoting_bad_inputs(baseline_memory):
    with pytest.raises(RuntimeError, match="Expected tensor with 2 or more dimensions"):
        torch.linalg.lu_factor(torch.ones(3, device="emu"), pivot=False)
    # dtypes no LU kernel has: CPU's error, at the call
    for dtype in (torch.float16, torch.int32):
        with pytest.raises(NotImplementedError, match="not implemented for"):
            torch.linalg.lu_factor(torch.ones(3, 3, device="emu", dtype=dtype), pivot=False)
    wrong_dtype = [torch.empty(0, device="emu"), torch.empty(0, device="emu"), torch.empty(0, device="emu", dtype=torch.int32)]
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype Int, but got Float"):
        torch.linalg.lu_factor_ex(torch.randn(3, 3, device="emu"), pivot=False, out=wrong_dtype)
    del wrong_dtype
