import pytest

from dlbench import axes, models, study


def cfg(grid, **extra):
    return {"studies": {"s": {"grid": grid, **extra}}}


def test_lists_expand_to_the_cartesian_product():
    cells = study.expand_config(cfg({"model": ["resnet18", "alexnet"], "batch_size": [4, 8, 16],
                                     "precision": ["float32", "bfloat16"], "device": "cpu"}))
    assert len(cells) == 12
    assert {c.params["batch_size"] for c in cells} == {4, 8, 16}
    assert all(c.params["num_batches"] == axes.get("num_batches").default for c in cells)


def test_several_studies_and_defaults():
    config = {"defaults": {"model": {"num_batches": 7}},
              "studies": {"a": {"grid": {"model": "resnet18", "device": "cpu"}},
                          "b": {"grid": {"model": ["alexnet", "vgg16"], "num_batches": 3}}}}
    cells = study.expand_config(config)
    assert [c.study for c in cells] == ["a", "b", "b"]
    assert cells[0].params["num_batches"] == 7 and cells[1].params["num_batches"] == 3


def test_overrides_and_exclusions():
    cells = study.expand_config(cfg(
        {"model": ["resnet18", "deep_mnist"], "precision": ["float32", "bfloat16"],
         "device": "cpu"},
        overrides=[{"match": {"model": "deep_mnist"}, "set": {"num_batches": 50}}],
        exclude=[{"model": "deep_mnist", "precision": "bfloat16"}]))
    by_model = {(c.params["model"], c.params["precision"]): c for c in cells}
    assert set(by_model) == {("resnet18", "float32"), ("resnet18", "bfloat16"),
                             ("deep_mnist", "float32")}
    assert by_model[("deep_mnist", "float32")].params["num_batches"] == 50
    assert by_model[("resnet18", "float32")].params["num_batches"] == 100


def test_precision_aliases_are_normalised():
    (cell,) = study.expand_config(cfg({"model": "resnet18", "precision": "float"}))
    assert cell.params["precision"] == "float32"


def test_cell_id_is_readable_and_changes_with_any_parameter():
    (a,) = study.expand_config(cfg({"model": "resnet18", "device": "cpu", "batch_size": 8}))
    (b,) = study.expand_config(cfg({"model": "resnet18", "device": "cpu", "batch_size": 8,
                                    "num_batches": 101}))
    assert a.id.startswith("pytorch_resnet18_training_float32_bs8_cpu1_synthetic_")
    assert a.id != b.id and a.id.split("_")[:-1] == b.id.split("_")[:-1]
    (again,) = study.expand_config(cfg({"model": "resnet18", "device": "cpu", "batch_size": 8}))
    assert again.id == a.id


@pytest.mark.parametrize(("grid", "extra", "message"), [
    ({"model": "resnet5000"}, {}, "study 's': model: unknown value 'resnet5000' (valid: alexnet,"),
    ({"model": "resnet18", "framework": "tensorflow"}, {}, "framework: unknown value 'tensorflow' (valid: pytorch, mxnet)"),
    ({"model": "resnet18", "precision": "int4"}, {}, "precision: unknown value 'int4' (valid: float32, tf32, float16, bfloat16, float64)"),
    ({"model": "resnet18", "batch_size": 0}, {}, "study 's': batch_size: must be >= 1, got 0"),
    ({"model": "resnet18", "batch_size": "8"}, {}, "batch_size: must be an integer, got '8'"),
    ({"model": "resnet18", "colour": "red"}, {}, "grid.colour: unknown axis"),
    ({"batch_size": 8}, {}, "grid.model: is required"),
    ({"model": "resnet18"}, {"bogus": 1}, "study 's': bogus: unknown key"),
    ({"model": "resnet18", "device": "cpu", "precision": "tf32"}, {}, "tf32 exists on device gpu only"),
    ({"model": "resnet18", "data": "imagenet"}, {}, "data: unknown dataset 'imagenet' (valid: synthetic)"),
    ({"model": "bert_base", "framework": "mxnet"}, {}, "pair mxnet/bert_base"),
    ({"model": "resnet18", "cudnn_benchmark": "yes"}, {}, "cudnn_benchmark: must be true or false"),
    ({"model": "bert_base", "model_opts": {"layers": 3}}, {}, "unknown model_opts layers"),
    ({"model": "bert_base", "model_opts": {"sequence_length": 1024}}, {}, "model_opts: bert: sequence_length must be an integer in 1..512, got 1024"),
    ({"model": "paradnn_fc", "model_opts": {"layers": 0}}, {}, "study 's': model_opts: "),
    ({"model": "resnet18"}, {"overrides": [{"match": {"model": "resnet18"}}]}, "overrides[0]: needs exactly the keys match and set"),
])
def test_bad_config_gives_one_line_naming_study_and_field(grid, extra, message):
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(cfg(grid, **extra))
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_no_studies_is_an_error():
    with pytest.raises(study.ConfigError, match="at least one study"):
        study.expand_config({"studies": {}})


def test_unused_axes_do_not_change_the_id():
    (a,) = study.expand_config(cfg({"model": "resnet18", "kv_store": "local"}))
    (b,) = study.expand_config(cfg({"model": "resnet18", "kv_store": "device"}))
    assert a.id == b.id and a.params["kv_store"] is None


def test_a_sweep_of_an_axis_the_runner_ignores_is_warned_of_once(capsys):
    """Synthetic cells ignore num_loader_threads and data_shuffle, CPU cells cuDNN's
    settings, yet their ids keep them: the study says how many cells repeat another's
    measurement and which axes make them differ."""
    cells = study.expand_config(cfg({"model": "deep_mnist", "device": "cpu",
                                     "num_loader_threads": [1, 4],
                                     "cudnn_benchmark": [True, False]}))
    assert len({c.id for c in cells}) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "study 's': 3 of its 4 cells repeat another's measurement" in err[0]
    assert "only in cudnn_benchmark, num_loader_threads," in err[0]
    assert cells[0].id in err[0]


def test_model_opts_that_only_spell_out_defaults_are_warned_of_as_repeats(capsys):
    """``{}``, ``{nodes: 64}`` and the same with ParaDnn's default optimizer build one
    model under three ids (ids are forever: they stay three); other options differ."""
    nodes = models.get("paradnn_fc").default_opts["nodes"]
    cells = study.expand_config(cfg({"model": "paradnn_fc", "device": "cpu", "model_opts": [
        {}, {"nodes": nodes}, {"nodes": nodes, "optimizer": "rmsprop"}, {"nodes": nodes * 2}]}))
    assert len({c.id for c in cells}) == 4
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "study 's': 2 of its 4 cells repeat another's measurement" in line
    assert "only in model_opts, which their runner ignores for them or which only spell " \
        "out a default" in line


def test_a_sweep_the_runner_measures_is_not_warned_of(capsys):
    """Real-data cells read with num_loader_threads; GPU cells run under cuDNN's
    settings; MXNet cells of one grid with PyTorch ones are no repeat of them."""
    study.expand_config({"datasets": {"images": {"synthetic": {}}},
                         **cfg({"model": "resnet18", "data": "images",
                                "num_loader_threads": [1, 4], "data_shuffle": [True, False],
                                "cudnn_benchmark": [True, False]})})
    study.expand_config(cfg({"model": "resnet18", "framework": ["pytorch", "mxnet"]}))
    assert capsys.readouterr().err == ""


def test_a_dataset_path_that_is_not_a_folder_is_named(tmp_path):
    config = {"datasets": {"imagenet": {"path": str(tmp_path / "nope")}},
              "studies": {"s": {"grid": {"model": "resnet50", "data": "imagenet"}}}}
    with pytest.raises(study.ConfigError, match=r"dataset 'imagenet': path: .*nope is not a folder"):
        study.expand_config(config)
    (tmp_path / "nope").mkdir()
    assert len(study.expand_config(config)) == 1


def test_settings_of_an_unknown_framework_are_one_config_error():
    with pytest.raises(study.ConfigError,
                       match=r"^config: frameworks.tensorflow: unknown framework \(valid: "):
        study.expand_config({"frameworks": {"tensorflow": {"python": "py"}},
                             "studies": {"s": {"grid": {"model": "deep_mnist"}}}})


def test_id_slugs_keep_true_and_one_apart_and_name_mappings():
    """Slugs are cached by value and type: True (a flag) reads "yes", 1 reads "1", in
    either order; a mapping (not cacheable) still gets its slug."""
    from dlbench.kinds import slug

    assert [slug(1), slug(True), slug(1), slug(False), slug(0)] == ["1", "yes", "1", "no", "0"]
    assert slug("configs/ops/my op.json") == "my-op"
    assert slug({"a": 1}) == "a-1"


def test_an_override_setting_an_alias_is_normalised_before_the_exclude_rules():
    """Grid values are normalised once, an override's values after it applies: an alias set
    by an override (f16) is float16 by the time exclude rules match."""
    cells = study.expand_config(cfg(
        {"model": ["resnet18", "alexnet"], "precision": "f32", "device": "gpu"},
        overrides=[{"match": {"model": "alexnet", "precision": "float32"},
                    "set": {"precision": "f16"}}],
        exclude=[{"model": "alexnet", "precision": "float16"}]))
    assert [(c.params["model"], c.params["precision"]) for c in cells] == [
        ("resnet18", "float32")]


def test_exclude_and_override_rules_match_precision_aliases(capsys):
    """The grid's values are normalised (bf16 is bfloat16): so are the rules', else a rule
    written as the grid is matches nothing and its cells run as they are."""
    cells = study.expand_config(cfg(
        {"model": "deep_mnist", "precision": ["f32", "bf16", "f16"], "device": "cpu"},
        exclude=[{"precision": "bf16"}],
        overrides=[{"match": {"precision": ["f32", "float16"]}, "set": {"num_batches": 7}}]))
    assert {c.params["precision"]: c.params["num_batches"] for c in cells} == {
        "float32": 7, "float16": 7}
    assert capsys.readouterr().err == ""


def test_an_override_whose_match_is_not_a_mapping_is_one_line():
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(cfg({"model": "deep_mnist"},
                                overrides=[{"match": ["model"], "set": {"num_batches": 7}}]))
    assert str(info.value) == ("study 's': overrides[0].match: must be a mapping of axes to "
                               "values, got ['model']")
