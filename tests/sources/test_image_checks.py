"""What every arrived image goes through (t2i_audit/sources/base.py): decoded once, bounded, described as
generate.py describes a pipeline's image — the black flag by the brightest pixel, found without a pass over every
pixel when a bright 8×8 block settles it."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from t2i_audit.errors import AuditError
from t2i_audit.generate import BLACK_MAX, pixel_digest
from t2i_audit.sources.base import checked_image


def _png(arr) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("level", [0, 4, 5, 6, 40])
@pytest.mark.parametrize("one_bright_pixel", [False, True])
def test_black_flag_is_the_brightest_pixel_rule(level, one_bright_pixel):
    arr = np.full((64, 64, 3), level, np.uint8)
    if one_bright_pixel:
        arr[10, 20, 1] = 200  # one pixel: its 8×8 block mean stays dark, the image is not black
    data, fields, ext = checked_image(_png(arr), "x.png")
    assert fields["flags"] == (["black"] if arr.max() / 255 < BLACK_MAX else [])
    assert fields["pixel_digest"] == pixel_digest(Image.fromarray(arr)) and ext == ".png" and data == _png(arr)


def test_a_format_readers_may_not_open_is_stored_as_png_and_jpeg_as_itself():
    arr = np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="BMP")
    data, fields, ext = checked_image(buf.getvalue(), "x.bmp")
    assert ext == ".png" and Image.open(io.BytesIO(data)).format == "PNG"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), arr)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG")
    data, _, ext = checked_image(buf.getvalue(), "x.png")  # named .png, holds a JPEG: kept as the JPEG it is
    assert ext == ".jpg" and data == buf.getvalue()


def test_bytes_that_are_no_image_name_where_they_came_from():
    with pytest.raises(AuditError, match=r"^somewhere/x.png: not a readable image \(no image format PIL knows"):
        checked_image(b"\x89PNG but not really", "somewhere/x.png")
