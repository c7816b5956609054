"""The Hugging Face Hub: search, model details and quant variants, downloads, auth.

Built on the real ``huggingface_hub`` client for every API call, URL, header and piece
of metadata; only the byte transfer of a file is ours (see :mod:`models.hub.transfer`
for why). Qt-free: the GUI and the CLI call the same functions.
"""
