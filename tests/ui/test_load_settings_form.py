"""The load settings form the Chat panel and the Settings page share: values that arrive
before the model's header are kept whole, the defaults mode speaks without a model, and
the sliders line up."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.ui.widgets.load_settings_form import LoadSettingsForm
from models.engine.settings import ALL_LAYERS, LoadSettings


def _header(tmp_path, n_ctx):
    from models.gguf_header import read_gguf_header
    from tests.models.library_gguf import write_gguf

    return read_gguf_header(write_gguf(tmp_path / f"ctx{n_ctx}.gguf", n_ctx=n_ctx))


def test_settings_shown_before_the_models_header_are_not_cut_to_the_default_ranges(qtbot, tmp_path):
    form = LoadSettingsForm()
    qtbot.addWidget(form)
    # As the Chat page does: the model's remembered settings at once, its header later.
    form.set_settings(LoadSettings(context_length=8192, gpu_layers=1))
    assert form.settings().context_length == 8192 and form.settings().gpu_layers == 1
    assert form.context_label.text() == "Context (8,192)"
    form.set_machine(_header(tmp_path, 16384), 8 << 30, 8 << 30)
    assert form.context.value() * 256 == 8192 and form.context_label.text() == "Context (8,192)"
    assert form.settings().context_length == 8192 and form.settings().gpu_layers == 1
    assert form.context_value.text() == "of 16,384"
    # The model's own trained length bounds what the slider offers once it is known.
    form.set_settings(LoadSettings(context_length=32768))
    assert form.settings().context_length == 16384
    # "The model's own" stays that (0), shown as the model's length, not as 4,096.
    form.set_settings(LoadSettings(context_length=0))
    assert form.settings().context_length == 0 and form.context_value.text() == "model's own"
    assert form.context_label.text() == "Context (16,384)"
    form.context.setValue(8)  # a person moves it
    assert form.settings().context_length == 2048 and form.context_value.text() == "of 16,384"


def test_a_header_that_arrives_first_is_kept_when_settings_follow(qtbot, tmp_path):
    form = LoadSettingsForm()
    qtbot.addWidget(form)
    form.set_machine(_header(tmp_path, 8192), 8 << 30, 8 << 30)
    form.set_settings(LoadSettings(context_length=6144, gpu_layers=ALL_LAYERS))
    assert form.settings().context_length == 6144 and form.gpu_layers_value.text() == "all"


def test_defaults_mode_has_no_model_and_says_all_none_or_a_number(qtbot):
    form = LoadSettingsForm(defaults=True)
    qtbot.addWidget(form)
    form.show()
    assert not form.verdict.isVisible() and not form.draft.isVisible()
    assert form.apply_button.accessibleName() == "Save the default load settings"
    form.set_settings(LoadSettings(context_length=65536, gpu_layers=ALL_LAYERS, threads=None))
    assert form.gpu_layers.isEnabled() and form.gpu_layers_value.text() == "all"
    assert form.settings().gpu_layers == ALL_LAYERS and form.settings().context_length == 65536
    assert form.threads_value.text() == "auto" and form.settings().threads is None
    form.gpu_layers.setFocus()
    qtbot.keyClick(form.gpu_layers, Qt.Key.Key_Home)
    assert form.gpu_layers_value.text() == "none" and form.settings().gpu_layers == 0
    for _ in range(12):
        qtbot.keyClick(form.gpu_layers, Qt.Key.Key_Right)
    assert form.gpu_layers_value.text() == "12" and form.settings().gpu_layers == 12
    form.context.setValue(0)
    assert form.context_value.text() == "model's own" and form.settings().context_length == 0
    assert form.context_label.text() == "Context (model's own)"


def test_a_quantized_v_cache_brings_flash_attention_with_it(qtbot):
    form = LoadSettingsForm()
    qtbot.addWidget(form)
    assert not form.flash.isChecked()
    form.kv_v.setCurrentText("q8_0")
    assert form.flash.isChecked() and form.settings().kv_cache_type_v == "q8_0"
    form.flash.setChecked(False)
    assert form.settings().kv_cache_type_v == "f16" and not form.settings().flash_attention


def test_the_sliders_line_up(qtbot, tmp_path):
    for defaults in (False, True):
        form = LoadSettingsForm(defaults=defaults)
        qtbot.addWidget(form)
        form.resize(360, 500)
        form.show()
        if not defaults:
            form.set_machine(_header(tmp_path, 4096), 8 << 30, 8 << 30)
        qtbot.waitExposed(form)
        sliders = (form.gpu_layers, form.context, form.threads)
        lefts = {s.mapTo(form, s.rect().topLeft()).x() for s in sliders}
        widths = {s.width() for s in sliders}
        assert len(lefts) == 1 and len(widths) == 1, (lefts, widths)


def test_defaults_on_a_machine_without_a_gpu_say_cpu_only_and_keep_all(qtbot):
    form = LoadSettingsForm(defaults=True)
    qtbot.addWidget(form)
    form.set_settings(LoadSettings(gpu_layers=12))
    assert form.gpu_layers_value.text() == "12" and form.settings().gpu_layers == 12
    form.set_machine(None, 8 << 30, None)  # a number of GPU layers would be refused at load
    assert not form.gpu_layers.isEnabled() and form.gpu_layers_value.text() == "CPU only"
    assert form.settings().gpu_layers == 0 and "No GPU" in form.gpu_layers.toolTip()
    form.set_settings(LoadSettings(gpu_layers=ALL_LAYERS))  # "all" is 0 here, and stays "all"
    assert form.settings().gpu_layers == ALL_LAYERS and form.gpu_layers_value.text() == "CPU only"
    form.set_machine(None, 8 << 30, 8 << 30)
    assert form.gpu_layers.isEnabled() and form.gpu_layers_value.text() == "all"


def test_the_settings_page_edits_the_defaults_with_the_same_form(qtbot):
    from app.core.model_settings import DEFAULT_LOAD_KEY
    from app.core.preferences import Preferences
    from app.ui.main_window import MainWindow
    from models.memory_fit import free_memory

    Preferences().set(DEFAULT_LOAD_KEY, {"context_length": 32768, "threads": 1, "use_mlock": True})
    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("Settings")
    form = page.load_form
    assert isinstance(form, LoadSettingsForm) and form.defaults
    assert form.context_label.text() == "Context (32,768)" and form.threads_value.text() == "1"
    gpu = free_memory()[1]
    qtbot.waitUntil(lambda: form.gpu_layers_value.text() == ("all" if gpu else "CPU only"), timeout=10_000)
    form.context.setValue(0)
    form.apply_button.click()
    saved = Preferences().get(DEFAULT_LOAD_KEY)
    assert saved["context_length"] == 0 and saved["threads"] == 1 and saved["use_mlock"]
    assert saved["gpu_layers"] == ALL_LAYERS and "Saved" in page.banner.text()


def test_a_moe_model_gets_the_experts_slider_and_its_parameters_in_the_verdict(qtbot, tmp_path):
    from models.gguf_header import read_gguf_header
    from models.memory_fit import FitSettings, predict_memory
    from tests.quantize.model_files import TinyLlama, write_tiny_llama

    moe = read_gguf_header(write_tiny_llama(tmp_path / "moe.gguf", TinyLlama(n_layer=4, n_expert=8)))
    form = LoadSettingsForm()
    qtbot.addWidget(form)
    form.show()
    form.set_settings(LoadSettings(gpu_layers=ALL_LAYERS, cpu_moe_layers=ALL_LAYERS))
    form.set_machine(_header(tmp_path, 4096), 8 << 30, 8 << 30)  # a dense model: no slider
    assert not form.cpu_moe.isVisible() and "active" not in form.verdict.text()
    assert form.settings().cpu_moe_layers == ALL_LAYERS  # kept for the next MoE model
    form.set_machine(moe, 8 << 30, 8 << 30)
    assert form.cpu_moe.isVisible() and form.cpu_moe_value.text() == "all"
    assert form.cpu_moe.accessibleName() == "Expert layers kept on the CPU"
    total_active = predict_memory(moe).parameters_text
    assert "total" in total_active and f"{total_active} parameters" in form.verdict.text()
    all_on_cpu = form.verdict.text()
    form.cpu_moe.setValue(1)  # a person keeps only the first layer's experts in RAM
    assert form.settings().cpu_moe_layers == 1 and form.cpu_moe_value.text() == "1 of 4"
    assert form.verdict.text() != all_on_cpu  # VRAM grew by three layers' experts
    vram = predict_memory(moe, FitSettings(n_ctx=4096, n_gpu_layers=5, cpu_moe_layers=1)).vram
    assert vram > predict_memory(moe, FitSettings(n_ctx=4096, n_gpu_layers=5, cpu_moe_layers=-1)).vram
    form.cpu_moe.setValue(0)
    assert form.settings().cpu_moe_layers == 0 and form.cpu_moe_value.text() == "none"


def test_defaults_mode_offers_the_experts_slider_for_moe_models(qtbot):
    form = LoadSettingsForm(defaults=True)
    qtbot.addWidget(form)
    form.show()
    form.set_settings(LoadSettings(cpu_moe_layers=ALL_LAYERS))
    assert form.cpu_moe.isVisible() and form.cpu_moe_value.text() == "all"
    assert "dense models ignore this" in form.cpu_moe.toolTip()
    form.cpu_moe.setValue(12)
    assert form.settings().cpu_moe_layers == 12 and form.cpu_moe_value.text() == "12"


def test_the_verdict_leaves_out_repacked_copies_where_this_computer_needs_the_safe_kernels(
        qtbot, tmp_path):
    """Where a load once crashed in the self-test with the extra buffer types, every later
    load goes without them (models/engine/fallback.py): the verdict predicts that load."""
    import re

    import pytest

    from models.gguf_header import read_gguf_header
    from models.memory_fit import FitSettings, predict_memory
    from models.weight_buffers import REPACK, this_cpu_backend
    from quantize.convert import convert
    from quantize.ftypes import FILE_TYPES
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
    from tests.factory.checkpoints import write_tiny_checkpoint

    if REPACK not in this_cpu_backend().extra_buffers or "AVX2" not in this_cpu_backend().features:
        pytest.skip("this CPU backend repacks no Q4_0 weights")
    ck = write_tiny_checkpoint(tmp_path / "tiny-llama", arch="llama", config_overrides={
        "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 4})  # copies of a few MiB show
    target = QuantizeTarget(FILE_TYPES["Q4_0"], tmp_path / "tiny-Q4_0.gguf")
    quantize_model(convert(ck.path, tmp_path / "tiny-F16.gguf", "f16"), [target], QuantizeOptions(pure=True))
    header = read_gguf_header(target.path)

    def ram_mib(safe_kernels: bool) -> int:
        form = LoadSettingsForm()
        qtbot.addWidget(form)
        form.set_settings(LoadSettings(context_length=256))
        form.set_machine(header, 8 << 30, None, safe_kernels=safe_kernels)
        return int(re.search(r"RAM (\d+) MiB", form.verdict.text()).group(1))

    def predicted_mib(use_extra_bufts: bool) -> int:
        return round(predict_memory(header, FitSettings(n_ctx=256, use_extra_bufts=use_extra_bufts)).ram
                     / 2**20)

    assert predicted_mib(True) - predicted_mib(False) >= 4  # the Q4_0 matrices' repacked copies
    assert ram_mib(safe_kernels=False) == predicted_mib(True)
    assert ram_mib(safe_kernels=True) == predicted_mib(False)
