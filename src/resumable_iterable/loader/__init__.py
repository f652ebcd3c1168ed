"""The loader layer: what a process iterates and how progress moves between processes.

Below the dataset facade, above the nodes. ``session.py`` owns one dataset's per-process
iteration state (the node tree being iterated or holding a loaded state, its DataLoader worker,
its epoch); ``resume.py`` picks that tree (fresh, loaded, or an elastic plan); ``elastic.py``
deals saved segments to another number of workers or ranks, in the plan format of ``plan.py``;
``loader_state.py`` reads and writes torchdata ``StatefulDataLoader`` states (whose keys it
spells once, without importing torchdata); ``hooks.py`` is
where a framework with worker processes (torch) registers what it shares with them.
"""
