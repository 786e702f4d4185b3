"""Pytree key texts remembered by the key itself (``xlakit._jax.arguments._key_text``, a hot path of every
attribution: thousands of argument and output leaves) print exactly as ``jax.tree_util.keystr`` does, including
keys that are ``==`` to a remembered one but print differently."""

from __future__ import annotations

import jax
import numpy as np

from xlakit._jax.arguments import _key_text


def test_key_text_matches_keystr_for_equal_keys_that_print_differently():
    tu = jax.tree_util
    keys = [tu.DictKey("w"), tu.DictKey(1), tu.DictKey(1.0), tu.DictKey(True), tu.SequenceKey(1),
            tu.GetAttrKey("mu"), tu.FlattenedIndexKey(1), tu.DictKey(np.str_("w")), tu.DictKey(np.int64(1))]
    for _ in range(2):  # the second round reads what the first remembered
        for key in keys:
            assert _key_text(key) == tu.keystr((key,)), key


def test_argument_paths_of_a_dict_with_numeric_and_bool_keys():
    """Int and float dict keys name the parameters by their own text."""
    from xlakit._jax.arguments import argument_leaves

    params = {1: np.ones(2, np.float32), 2.5: np.ones(3, np.float32)}
    compiled = jax.jit(lambda p: p[1].sum() + p[2.5].sum()).lower(params).compile()
    paths = sorted(leaf.path for leaf in argument_leaves(compiled).values())
    assert paths == ["args[0][1]", "args[0][2.5]"]
