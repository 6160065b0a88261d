"""Camera frames as imago reads them: square, RGB, 8 bits."""

from typing import Tuple

import numpy as np


def square_frame(rgb, size: int) -> Tuple[int, int, bytes]:
    """`rgb` (H x W x 3, uint8 or float in [0, 1]) cropped to its centred square and
    resized to `size` x `size` by nearest neighbour: (width, height, bytes)."""
    image = np.asarray(rgb)
    if image.ndim != 3 or image.shape[2] < 3:
        raise ValueError(f"a camera frame must be H x W x 3, got shape {image.shape}")
    if image.shape[0] == 3 and image.shape[2] != 3:
        image = np.transpose(image, (1, 2, 0))
    if image.dtype != np.uint8:
        image = np.clip(np.asarray(image, dtype=np.float32) * 255.0, 0, 255).astype(np.uint8)
    height, width = image.shape[:2]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    index = np.arange(size) * side // size
    square = image[top + index][:, left + index, :3]
    return size, size, np.ascontiguousarray(square).tobytes()
