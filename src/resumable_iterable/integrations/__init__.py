"""Optional integrations. ``integrations.torch`` needs torch (and torchdata for its
``StatefulDataLoader``), ``integrations.transformers`` transformers and accelerate,
``integrations.lightning`` PyTorch Lightning; the core package never imports them."""
