"""Stand-ins for device objects, so host-side tests run without a GPU."""
import numpy as np


class FakeDeviceArray:
    """Just enough of a device array for launcher validation, without a GPU: shape, dtype, ndim, size and
    a ``__cuda_array_interface__`` whose pointer and strides the test chooses."""

    def __init__(self, shape, dtype, ptr=0x10000, strides=None):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)
        self.size = int(np.prod(self.shape)) if self.shape else 1
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": self.dtype.str,
                                         "data": (ptr, False), "strides": strides, "version": 3}


ATTN_BWD_NAMES = ("q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv")


def attn_bwd_arrays(q_shape, kv_shape, lse_shape, **over):
    """Stand-ins for the nine arrays the attention backward takes, in its order (ATTN_BWD_NAMES): q, out, dout and dq
    shaped ``q_shape``, k, v, dk and dv ``kv_shape`` (bf16), lse ``lse_shape`` (float32); ``over`` replaces any of
    them by name. Dense [B, H, S, D] or varlen [T, H, D] alike."""
    from utils.arrays import bf16
    shapes = {"q": q_shape, "k": kv_shape, "v": kv_shape, "out": q_shape, "lse": lse_shape, "dout": q_shape,
              "dq": q_shape, "dk": kv_shape, "dv": kv_shape}
    return [over.get(n, FakeDeviceArray(shapes[n], np.float32 if n == "lse" else bf16(), ptr=(i + 1) << 36))
            for i, n in enumerate(ATTN_BWD_NAMES)]
