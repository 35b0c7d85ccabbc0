"""logit_hash: the reply's per-token fingerprint of the logits row it was sampled from."""

from __future__ import annotations

import hashlib

import numpy as np

from engine.lanes.sampling import logit_hash


def test_logit_hash_is_blake2b_over_float32_bytes() -> None:
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    want = hashlib.blake2b(row.tobytes(), digest_size=8).hexdigest()[:16]
    assert logit_hash(row) == want and len(want) == 16
    assert logit_hash(row.astype(np.float64)) == want  # hashed as float32


def test_one_ulp_changes_the_hash_but_not_the_argmax() -> None:
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    nudged = row.copy()
    nudged[3] = np.nextafter(nudged[3], np.float32(np.inf))
    assert int(np.argmax(row)) == int(np.argmax(nudged))
    assert logit_hash(row) != logit_hash(nudged)
    strided = np.stack([row, row], axis=1)[:, 0]  # not contiguous: same bytes once copied
    assert logit_hash(strided) == logit_hash(row)
