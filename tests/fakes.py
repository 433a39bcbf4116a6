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
