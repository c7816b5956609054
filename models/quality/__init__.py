"""Measuring what a quantization costs: importance matrices and quality reports.

The numbers are llama.cpp's (``tools/imatrix/imatrix.cpp`` and
``tools/perplexity/perplexity.cpp``), computed the same way so they can be compared with
results published for llama.cpp:

* **Chunks.** The text is tokenized once (with the model's BOS when it adds one); chunk
  ``i`` is tokens ``[i*n_ctx, (i+1)*n_ctx)``, its first token replaced by BOS. The KV
  cache is cleared before each chunk; ``n_batch // n_ctx`` chunks are decoded together
  as separate sequences. At least two chunks are needed (``chunks.py``).
* **Perplexity** is scored on each chunk's second half: positions ``n_ctx/2 ..
  n_ctx-2`` predict the next token.
* **KL divergence** compares the quant's next-token distribution with its source's at
  those positions: mean KLD, percentiles, "same top token", Δp of the right token
  (``kld.py``). llama.cpp stores every base log-probability (37 GiB for Llama 3 on
  Wikitext-2); we keep, per scored position, the base's top ``k`` log-probabilities, the
  right token's log-probability and the log of the remaining mass (``base_data.py``),
  a few tens of MB whatever the vocabulary, with the error stated in
  ``tests/benchmarks/README.md``. The base pass is cached per source file and text.
* **Importance matrix**: for every ``blk.*`` matrix multiplication with at least 16
  rows (and every ``MUL_MAT_ID``, per expert), the sum of squared input activations per
  input column and the number of rows, collected through llama.cpp's graph callback
  (``collect.py``), written as llama-imatrix's GGUF (``quantize.imatrix.save_imatrix``).

Running a model means running llama.cpp, which can abort its process, so the passes run in
a child process of their own (``worker.py``, started by ``runner.py`` with the ``spawn``
context like the chat engine); a crash there is reported as a sentence.

Modules: ``chunks`` (chunking), ``kld`` (per-token comparison and llama.cpp's
statistics), ``base_data`` (the compact base file and its cache), ``text`` (calibration
and evaluation text, the built-in one included), ``collect`` (the activation collector),
``worker`` (the child process), ``runner`` (the parent side: imatrix generation and the
quality report).
"""
