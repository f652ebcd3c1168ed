"""Inputs of ``interleave_datasets`` / ``concatenate_datasets`` that do not fit together, side by side
with HF ``datasets``: HF refuses a column of two types when it builds the combination (it infers
unknown features from the first examples); building reads no example here, so an input whose
features are unknown has its first example checked before it is yielded (``nodes/column_types.py``):
a ``ValueError`` naming the column, both inputs and the two kinds, never a wrong row yielded first
nor a raw pyarrow error from a format above, and the state taken after it resumes exactly (the
same error again). Other wrong arguments get errors naming them, raised when building."""

from __future__ import annotations

import json
import pickle

import datasets
import numpy as np
import pytest
from datasets import Features, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly, normalize

INTS = [{"a": i} for i in range(4)]
STRS = [{"a": str(i)} for i in range(4)]
NULLS = [{"a": None}] * 2


def known(lib, rows, features=None):
    d = datasets.Dataset.from_list(rows, features=features)
    return d.to_iterable_dataset(num_shards=2) if lib is datasets else ri.to_iterable_dataset(d, num_shards=2)


def _rows(rows):
    yield from rows


def gen(lib, rows):
    return (datasets.IterableDataset if lib is datasets else ri.IterableDataset).from_generator(
        _rows, gen_kwargs={"rows": rows})


COMBINE = {
    "interleave": lambda lib, d: lib.interleave_datasets(d),
    "interleave_all_exhausted": lambda lib, d: lib.interleave_datasets(d, stopping_strategy="all_exhausted"),
    "interleave_probabilities": lambda lib, d: lib.interleave_datasets(d, probabilities=[0.5, 0.5], seed=1),
    "concatenate": lambda lib, d: lib.concatenate_datasets(d),
}

MISFITS = {  # (inputs, the kinds the error names)
    "batched_known_vs_unbatched_generator": (lambda lib: [known(lib, INTS).batch(2), gen(lib, INTS)],
                                             "holds a number in the first example of dataset 1"),
    "unbatched_generator_vs_batched_known": (lambda lib: [gen(lib, INTS), known(lib, INTS).batch(2)],
                                             "holds a number in the first example of dataset 0"),
    "int_known_vs_string_generator": (lambda lib: [known(lib, INTS), gen(lib, STRS)], "holds a string"),
    "int_generator_vs_string_generator": (lambda lib: [gen(lib, INTS), gen(lib, STRS)], "column 'a' holds a"),
    "batched_generator_vs_generator": (lambda lib: [gen(lib, INTS).batch(2), gen(lib, INTS)], "column 'a' holds a"),
    "string_map_vs_int_known": (lambda lib: [known(lib, INTS).map(lambda x: {"a": str(x["a"])}), known(lib, INTS)],
                                "holds a string in the first example of dataset 0"),
    "nested_struct_field": (lambda lib: [gen(lib, [{"m": {"x": 1}}] * 3), gen(lib, [{"m": {"x": [1]}}] * 3)],
                            "column 'm.x' holds a"),
}


@pytest.mark.parametrize("misfit", sorted(MISFITS))
@pytest.mark.parametrize("name", sorted(COMBINE))
def test_a_column_of_two_kinds_is_refused_as_hf_before_a_wrong_row(name, misfit):
    """A batch()-ed input next to an unbatched generator, or an int column next to strings, was
    yielded row by row (and failed in a format above with a raw pyarrow error); HF refuses it when
    it builds the combination. Now the first example of the input of unknown features raises."""
    inputs, says = MISFITS[misfit]
    with pytest.raises(ValueError, match="can't be aligned"):
        COMBINE[name](datasets, inputs(datasets))
    ds = COMBINE[name](ri, inputs(ri))
    rows = []
    try:
        for r in ds:
            rows.append(r)
    except ValueError as e:
        assert "the columns can't be aligned" in str(e) and says in str(e)
    else:  # drawn at random, the input of unknown features may end up never drawn before the end
        assert name == "interleave_probabilities"
    kinds = {type(normalize(r.get("a", r.get("m")))) for r in rows}
    assert len(kinds) <= 1, f"rows of two kinds were yielded before the error: {rows}"


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas"])
@pytest.mark.parametrize("name", ["interleave", "concatenate"])
def test_batched_and_unbatched_under_a_format_is_no_raw_pyarrow_error(name, fmt):
    """The known case: a batch()-ed dataset combined with an unbatched one of unknown features,
    formatted and batched, raised pyarrow's 'cannot mix list and non-list, non-null values'."""
    ds = COMBINE[name](ri, [known(ri, INTS).batch(2), gen(ri, INTS)]).with_format(fmt).batch(2)
    with pytest.raises(ValueError, match=r"column 'a' holds a number in the first example of dataset 1 \(whose "
                                         r"features are unknown\), and is List\(Value\('int64'\)\) in the features "
                                         "of dataset 0"):
        list(ds)


@pytest.mark.parametrize("name", sorted(COMBINE))
def test_the_state_after_the_error_resumes_exactly(name):
    """Every cut point before the error resumes to the same rows then the same error; the state taken
    after the error (JSON round trip) raises it again, nothing yielded before lost or repeated."""
    def build_bad():
        return COMBINE[name](ri, [known(ri, INTS), gen(ri, STRS)])

    full = []
    with pytest.raises(ValueError, match="can't be aligned"):
        for r in build_bad():
            full.append(r)
    for k in range(len(full) + 1):
        ds = build_bad()
        it = iter(ds)
        head = [next(it) for _ in range(k)]
        assert head == full[:k]
        state = json.loads(json.dumps(ds.state_dict()))
        resumed = build_bad()
        resumed.load_state_dict(state)
        tail = []
        with pytest.raises(ValueError, match="can't be aligned"):
            for r in resumed:
                tail.append(r)
        assert tail == full[k:]
    ds = build_bad()
    with pytest.raises(ValueError, match="can't be aligned"):
        list(ds)
    resumed = build_bad()
    resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    with pytest.raises(ValueError, match="can't be aligned"):
        next(iter(resumed))


@pytest.mark.parametrize("name", sorted(COMBINE))
def test_inputs_that_fit_resume_exactly_with_the_check(name):
    """The check of the first examples changes nothing for inputs that fit (numbers of two types,
    a null, a column one input lacks): every cut point resumes exactly, pickled nodes too."""
    floats = [{"a": i + 0.5, "b": None} for i in range(3)]
    rows = assert_resumes_exactly(lambda: COMBINE[name](ri, [known(ri, INTS), gen(ri, floats)]))
    assert rows == list(COMBINE[name](ri, [known(ri, INTS), gen(ri, floats)]))
    ds = COMBINE[name](ri, [gen(ri, NULLS), gen(ri, STRS)])
    assert list(pickle.loads(pickle.dumps(ds))) == list(ds)


def test_a_shuffled_concatenation_checks_each_input_in_its_dealt_order():
    """Under a shuffle the shards of the inputs are dealt anew (``_of_pieces``): the check follows
    its inputs, so the error names the input the bad example came from."""
    ds = ri.concatenate_datasets([known(ri, INTS), gen(ri, STRS)]).shuffle(seed=3, buffer_size=2)
    with pytest.raises(ValueError, match="holds a string in the first example of dataset") as e:
        list(ds)
    assert "Value('int64') in the features of dataset" in str(e.value)
    ok = ri.concatenate_datasets([known(ri, INTS), gen(ri, [{"a": 7}] * 3)]).shuffle(seed=3, buffer_size=2)
    assert sorted(r["a"] for r in ok) == [0, 1, 2, 3, 7, 7, 7]


def test_two_known_inputs_that_clash_are_refused_when_built_even_next_to_an_unknown_one():
    with pytest.raises(ValueError, match="column 'a' is Value\\('string'\\) in dataset 2 and Value\\('int64'\\) in "
                                         "dataset 0"):
        ri.interleave_datasets([known(ri, INTS), gen(ri, INTS), known(ri, STRS)])


def test_one_dataset_instead_of_a_list_is_refused_without_reading_it():
    read = []

    def g():
        for i in range(3):
            read.append(i)
            yield {"a": i}

    ds = ri.IterableDataset.from_generator(g)
    for combine in (ri.interleave_datasets, ri.concatenate_datasets):
        with pytest.raises(TypeError, match="got one IterableDataset: pass \\[ds, ...\\]"):
            combine(ds)
        with pytest.raises(TypeError, match="takes a list of datasets, got NoneType"):
            combine(None)
    assert read == []


@pytest.mark.parametrize("probabilities", [[0.5, None], "ab", [0.5, "x"], {"a": 1}])
def test_probabilities_that_are_not_numbers_are_named(probabilities):
    with pytest.raises(ValueError, match="probabilities must be a list of numbers, one per dataset"):
        ri.interleave_datasets([known(ri, INTS), known(ri, INTS)], probabilities=probabilities, seed=0)


def test_numpy_and_list_values_are_kinds_too():
    from resumable_iterable.nodes.column_types import value_kind

    assert value_kind(np.arange(3)) == value_kind([1, 2]) == ("list", "number")
    assert value_kind(np.int64(3)) == value_kind(2.5) == "number"
    assert value_kind([None, "a"]) == ("list", "string")
    assert value_kind(object()) is None
    feats = Features({"a": Value("int64")})
    assert list(ri.interleave_datasets([known(ri, INTS, feats), gen(ri, [{"a": np.int32(1)}])])) == [
        {"a": 0}, {"a": np.int32(1)}]


def _duplicated_later():
    yield {"a": 100}  # its first example has a column of the other input: refused
    yield {"b": 101}
    yield {"b": 102}


def test_a_duplicated_column_found_when_iterating_axis_1_leaves_a_state_that_raises_it_again():
    """Inputs of unknown columns: the duplicate is found at the first row (HF: at the call). The
    example that clashed was dropped from the row kept in the state, so the state taken after the
    error resumed without it: rows paired off by one ({'a': 0, 'b': 101}), silently."""
    def build():
        return ri.concatenate_datasets([gen(ri, [{"a": i} for i in range(3)]),
                                        ri.IterableDataset.from_generator(_duplicated_later)], axis=1)

    ds = build()
    with pytest.raises(ValueError, match=r"columns \['a'\] are duplicated: .*\(dataset 1, and dataset\(s\) \[0\]\)"):
        list(ds)
    resumed = build()
    resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    with pytest.raises(ValueError, match="columns \\['a'\\] are duplicated"):
        list(resumed)
    with pytest.raises(ValueError, match="can't have duplicated columns"):
        datasets.concatenate_datasets([gen(datasets, [{"a": 1}]), gen(datasets, [{"a": 100}])], axis=1)


@pytest.mark.parametrize("name", ["interleave", "concatenate"])
def test_the_check_runs_in_dataloader_workers_and_resumes_exactly(name):
    """The check travels to the workers with the pipeline (pickled): inputs that fit resume exactly
    at every cut point; a clash raises in the worker, named."""
    from harness import assert_loader_resumes_exactly
    from torchdata.stateful_dataloader import StatefulDataLoader

    def build():
        return COMBINE[name](ri, [known(ri, INTS), gen(ri, [{"a": 10 + i} for i in range(4)])])

    full = assert_loader_resumes_exactly(build, workers=2, batch_size=None, item=repr, cuts=lambda n: range(1, n + 1))
    assert full
    bad = COMBINE[name](ri, [known(ri, INTS), gen(ri, STRS)])
    with pytest.raises(ValueError, match="column 'a' holds a string in the first example of dataset 1"):
        list(StatefulDataLoader(bad, batch_size=None, num_workers=2))


MIXED = [{"a": 1}, {"a": 2}, {"a": "x"}, {"a": 4}, {"a": [5]}]  # the first example fits; later ones do not


def _mixed():
    yield from MIXED


@pytest.mark.parametrize("name", sorted(COMBINE))
def test_a_resumed_pass_checks_the_same_examples_as_the_uninterrupted_run(name):
    """Only each input's first example is checked: a resumed pass checked the first example it read of
    each input (an interleave's peeked one, the rest of a concatenation's current input), a later
    one, and raised where the uninterrupted run yielded it. Every cut point resumes exactly; the
    kinds of an input read before the cut still count (a later input clashing with them raises as
    in the uninterrupted run)."""
    # one shard: the generator counts its examples; five (one per row): it cannot, which the
    # interleave does not need (it knows which inputs it read), but a concatenation does
    for mixed in [lambda: ri.IterableDataset.from_generator(_mixed)] + (
            [lambda: gen(ri, MIXED)] if name != "concatenate" else []):
        rows = assert_resumes_exactly(lambda: COMBINE[name](ri, [known(ri, INTS), mixed()]))
        assert {"a": "x"} in rows
        rows = assert_resumes_exactly(lambda: COMBINE[name](ri, [mixed(), known(ri, INTS)]))
        assert {"a": "x"} in rows


@pytest.mark.parametrize("name", ["interleave", "interleave_all_exhausted"])
def test_a_resumed_interleave_still_compares_with_the_inputs_read_before(name):
    def build():
        return COMBINE[name](ri, [gen(ri, INTS), gen(ri, STRS)])

    says = "column 'a' holds a string in the first example of dataset 1 .*, and is a number in the first example of dataset 0"
    full = []
    with pytest.raises(ValueError, match=says):
        for r in build():
            full.append(r)
    assert full == [{"a": 0}]
    ds = build()
    next(iter(ds))
    resumed = build()
    resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    with pytest.raises(ValueError, match=says):
        next(iter(resumed))


# ---------------------------------------------------------------- inputs that cannot count their examples
# ``Node.examples_yielded()`` is None for them: a generator past its first shard, a filter, a batch. What a
# resumed pass checks comes from the state's ``first_kinds`` (``nodes/column_types.py``), not from counts.

def _shards(shards):
    for rows in shards:
        yield from rows


def sharded_gen(shards):
    """A generator of several shards (``shards``: a list of row lists, one per shard)."""
    return ri.IterableDataset.from_generator(_shards, gen_kwargs={"shards": shards})


def _keep(x):
    return True


def _run_to_error(ds) -> tuple[list, str | None]:
    rows = []
    try:
        for r in ds:
            rows.append(normalize(r))
    except ValueError as e:
        assert "can't be aligned" in str(e), e
        return rows, str(e)
    return rows, None


def assert_resumes_exactly_to_the_error(build) -> tuple[list, str | None]:
    """Every cut point (before the error, right before it, after it), the state through a JSON round trip,
    resumes to the same rows and then the same error (or end) as the uninterrupted run."""
    full, error = _run_to_error(build())
    for k in range(len(full) + 1):
        ds = build()
        it = iter(ds)
        assert [normalize(next(it)) for _ in range(k)] == full[:k]
        resumed = build()
        resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
        assert _run_to_error(resumed) == (full[k:], error), f"cut {k} of {len(full)}"
    ds = build()
    assert _run_to_error(ds) == (full, error)
    for _ in range(2):  # the state after the error raises it again (and again)
        resumed = build()
        resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
        assert _run_to_error(resumed) == ([], error)
        ds = resumed
    return full, error


BAD_FIRST = {  # an input whose first example clashes with the ints of the known input, and cannot count
    "generator_past_its_first_shard": lambda: sharded_gen([[], [{"a": "x"}, {"a": "y"}], [{"a": "z"}]]),
    "filter": lambda: sharded_gen([[{"a": "x"}, {"a": "y"}, {"a": "z"}]]).filter(_keep),
    "batch": lambda: sharded_gen([[{"a": 1}, {"a": 2}], [{"a": 3}]]).batch(2),
}


@pytest.mark.parametrize("name", sorted(COMBINE))
@pytest.mark.parametrize("kind", sorted(BAD_FIRST))
def test_a_state_after_the_error_on_an_input_that_cannot_count_raises_again(name, kind):
    """The state taken after the first-row error on such an input resumed past the bad example (yielded
    it and the rest of the input, unchecked): the interleave could not tell the example it kept was the
    input's first. The state now says which inputs' first examples passed the check (a concatenation,
    which holds the example, went right: checked as well)."""
    full, error = assert_resumes_exactly_to_the_error(lambda: COMBINE[name](ri, [known(ri, INTS), BAD_FIRST[kind]()]))
    assert error is not None or name == "interleave_probabilities"
    full, error = assert_resumes_exactly_to_the_error(lambda: COMBINE[name](ri, [BAD_FIRST[kind](), known(ri, INTS)]))
    assert error is not None and (full == [] or name == "interleave_probabilities")


LATER_MISFIT = {  # first example fits the ints; a later one is of another kind (only first examples are checked)
    "generator_past_its_first_shard": lambda: sharded_gen([[{"a": 10}], [{"a": 11}], [{"a": "x"}, {"a": 13}]]),
    "filter": lambda: sharded_gen([[{"a": 10}, {"a": 11}, {"a": "x"}, {"a": 13}]]).filter(_keep),
    "batch": lambda: sharded_gen([[{"a": 10}, {"a": 11}], [{"a": "x"}, {"a": 13}]]).batch(1),
}


@pytest.mark.parametrize("kind", sorted(LATER_MISFIT))
def test_a_resumed_concatenation_checks_no_later_example_of_an_input_that_cannot_count(kind):
    """A resumed pass checked the next example of the input it was reading as if it were its first: an
    example of another kind that the uninterrupted run yielded raised instead. Inputs of either order,
    batched or not."""
    batched = kind == "batch"

    def first():
        return known(ri, INTS).batch(1) if batched else known(ri, INTS)

    for inputs in (lambda: [first(), LATER_MISFIT[kind]()], lambda: [LATER_MISFIT[kind](), first()]):
        full, error = assert_resumes_exactly_to_the_error(lambda: ri.concatenate_datasets(inputs()))
        assert error is None and normalize({"a": ["x"] if batched else "x"}) in full


@pytest.mark.parametrize("name", sorted(COMBINE))
def test_two_inputs_of_unknown_features_clash_after_any_cut(name):
    """The inputs read later are compared with the first examples of those read before: a resumed pass
    compared them with nothing (a concatenation resumed in its first input) or with the next example of
    an input read before (an interleave), and yielded what the uninterrupted run refused."""
    full, error = assert_resumes_exactly_to_the_error(
        lambda: COMBINE[name](ri, [sharded_gen([[{"a": 1}, {"a": "x"}], [{"a": "y"}]]), gen(ri, STRS)]))
    assert error is not None or name == "interleave_probabilities"


def test_states_of_the_release_before_first_kinds_still_load():
    """A state written before ``first_kinds`` existed loads, and its pass goes as that release's did: with
    inputs that count their examples, every cut point resumes exactly, the error included."""
    for name in sorted(COMBINE):
        def build():
            return COMBINE[name](ri, [known(ri, INTS), gen(ri, [{"a": 10}, {"a": "x"}, {"a": 12}])])

        full, error = _run_to_error(build())
        for k in range(len(full) + 1):
            ds = build()
            it = iter(ds)
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(ds.state_dict()))
            assert state["state"].pop("first_kinds") is not None
            resumed = build()
            resumed.load_state_dict(state)
            assert _run_to_error(resumed) == (full[k:], error), (name, k)
        bad = build()
        state = bad.state_dict()
        state["state"]["first_kinds"] = [None, 3]
        with pytest.raises(ValueError, match="'first_kinds' must be a list of 2 nulls or JSON objects"):
            build().load_state_dict(state)


def _loader_run(build, workers: int, state=None, stop=None):
    """Items (``repr``) through a StatefulDataLoader until ``stop`` items, the end or the error: ``(items,
    raised, state)``."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    dl = StatefulDataLoader(build(), batch_size=None, num_workers=workers)
    if state is not None:
        dl.load_state_dict(state)
    if stop == 0:
        return [], False, dl.state_dict()
    out = []
    try:
        for b in dl:
            out.append(repr(normalize(b)))
            if len(out) == stop:
                return out, False, dl.state_dict()
    except ValueError as e:
        assert "can't be aligned" in str(e), e
        return out, True, dl.state_dict()
    return out, False, dl.state_dict()


LOADER_CASES = {  # four shards each, so that both workers read past their first shard
    "interleave_generator": lambda: ri.interleave_datasets([
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(8)]), num_shards=4),
        sharded_gen([[], [{"a": "x"}], [], [{"a": "y"}]])]),
    "interleave_filter": lambda: ri.interleave_datasets([
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(8)]), num_shards=4),
        sharded_gen([[{"a": "x"}], [{"a": "y"}], [{"a": "z"}], [{"a": "w"}]]).filter(_keep)]),
    "interleave_batch": lambda: ri.interleave_datasets([
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(8)]), num_shards=4),
        sharded_gen([[], [{"a": 1}, {"a": 2}], [], [{"a": 3}]]).batch(1)]),
    "concatenate_bad_filter": lambda: ri.concatenate_datasets([
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(8)]), num_shards=4),
        sharded_gen([[{"a": "x"}], [{"a": "y"}], [{"a": "z"}], [{"a": "w"}]]).filter(_keep)]),
    "concatenate_generator": lambda: ri.concatenate_datasets([
        sharded_gen([[{"a": 1}], [{"a": 2}, {"a": "x"}], [{"a": 3}], [{"a": 4}, {"a": "y"}]]),
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(4)]), num_shards=4)]),
    "concatenate_filter": lambda: ri.concatenate_datasets([
        sharded_gen([[{"a": 1}, {"a": "x"}], [{"a": 2}, {"a": "y"}], [{"a": 3}], [{"a": 4}, {"a": "z"}]]).filter(_keep),
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(4)]), num_shards=4)]),
    "concatenate_batch": lambda: ri.concatenate_datasets([
        sharded_gen([[{"a": 1}, {"a": "x"}], [{"a": 2}, {"a": "y"}], [{"a": 3}], [{"a": 4}]]).batch(1),
        ri.to_iterable_dataset(datasets.Dataset.from_list([{"a": i} for i in range(4)]), num_shards=4).batch(1)]),
}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("case", sorted(LOADER_CASES))
def test_inputs_that_cannot_count_resume_exactly_through_a_loader(case, workers):
    """The same through torchdata's StatefulDataLoader, in process and in two workers: every cut point
    before the error resumes to the same items and the same error (or end); the state taken after the
    error raises it again."""
    build = LOADER_CASES[case]
    full, raised, after = _loader_run(build, workers)
    assert raised == (case.startswith("interleave") or "bad" in case)
    for k in range(len(full) + 1):
        head, _, state = _loader_run(build, workers, stop=k)
        tail, raised_again, _ = _loader_run(build, workers, state=state)
        assert (head + tail, raised_again) == (full, raised), f"cut after {k} of {len(full)} items"
    if raised:
        assert _loader_run(build, workers, state=after)[:2] == ([], True)


@pytest.mark.parametrize("name", sorted(COMBINE))
def test_a_node_whose_state_has_no_first_kinds_still_iterates(name):
    """A node pickled by an earlier build (a first-row check, no ``first_kinds`` in its live state) raised
    KeyError at its first pass: the field is rebuilt as for a state without it."""
    ds = COMBINE[name](ri, [known(ri, INTS), gen(ri, [{"a": 10}, {"a": 11}])])
    for consumed in (False, True):  # a concatenation's pass may start past its last input
        node = ds.pipeline.clone()
        if consumed:
            list(node)
        del node._state_dict["first_kinds"]
        assert [normalize(r) for r in node] == ([] if consumed else [normalize(r) for r in ds])
