"""Pipeline nodes: one kind per module, all following the contract in :mod:`.base`."""
