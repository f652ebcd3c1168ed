"""Optional integrations. ``integrations.torch`` needs torch (and torchdata for its
``StatefulDataLoader``); the core package never imports them."""
