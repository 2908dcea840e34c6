"""The CPU, GPU and CSX backends in one process: seed rules, ClusterConfig, the CSX hand-off."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest
import torch

import plugtrain
from plugtrain.cli import main as plugtrain_main
from plugtrain.errors import BackendError, ConfigError
from plugtrain.testing import assert_plugin_contract, assert_plugin_installed
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")

SEED_TEXT = (
    "Cannot instantiate multiple backends. A backend with type CSX has already been instantiated."
)


def _mlp():
    from plugtrain.builtin.models import MLP

    return MLP(in_features=8, out_features=3, hidden=8)


# -- the plugin ------------------------------------------------------------------------------


def test_plugin_is_installed_and_keeps_the_contract():
    assert_plugin_installed("plugtrain-backends")
    assert_plugin_contract("plugtrain-backends")


@pytest.mark.parametrize("name", ["CPU", "GPU", "CSX", "cpu", "gpu", "csx"])
def test_every_backend_resolves_in_any_case(name):
    assert plugtrain.resolve("backend", name).backend_type == name.upper()


# -- the seed's rules ------------------------------------------------------------------------


def test_seed_invalid_python_config_csx_then_cpu_raises_the_seed_text():
    with pytest.raises(BackendError, match="needs the Cerebras software stack"):
        Trainer(device="CSX", model=_mlp)
    with pytest.raises(RuntimeError) as info:
        Trainer(device="CPU", model=_mlp)
    assert str(info.value) == SEED_TEXT


def test_seed_csx_trainer_stops_before_building_anything():
    built = []

    def model():
        built.append(True)
        return _mlp()

    with pytest.raises(BackendError, match="needs the Cerebras software stack"):
        Trainer(device="CSX", model=model)
    assert built == []


def test_seed_python_backend_is_reused_and_changed_between_trainers(tmp_path):
    dirs = [tmp_path / "dir1", tmp_path / "dir2"]
    for directory in dirs:
        directory.mkdir()
    backend = plugtrain.backend(
        "CSX",
        cluster_config=plugtrain.distributed.ClusterConfig(
            num_csx=4, mount_dirs=[str(d) for d in dirs]
        ),
    )
    assert plugtrain.ClusterConfig is plugtrain.distributed.ClusterConfig
    backend.cluster_config.num_csx = 2
    backend.cluster_config.num_workers_per_csx = 1
    assert backend.settings()["cluster_config"]["num_csx"] == 2
    assert plugtrain.backend("CSX", compile_only=True).compile_only
    with pytest.raises(ConfigError, match=r"ClusterConfig.num_csx: must be > 0, got 0"):
        backend.cluster_config.num_csx = 0
    assert backend.cluster_config.num_csx == 2


def test_cpu_backend_object_serves_several_trainers(tmp_path):
    backend = plugtrain.backend("CPU")
    first = Trainer(backend=backend, model=_mlp, model_dir=tmp_path)
    second = Trainer(backend=backend, model=_mlp, model_dir=tmp_path)
    assert first.backend is second.backend is backend
    assert first.is_main_process


# -- ClusterConfig ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_csx": 0}, "ClusterConfig.num_csx: must be > 0, got 0"),
        ({"num_csx": "4"}, "ClusterConfig.num_csx: must be of type int, got str '4'"),
        ({"num_workers_per_csx": 0}, "must be > 0"),
        ({"max_wgt_servers": -1}, "must be >= 0"),
        ({"max_act_per_csx": -1}, "must be >= 0"),
        ({"job_time_sec": 0}, "must be > 0"),
        ({"mgmt_address": "cluster"}, "mgmt_address must look like host:port"),
        ({"mgmt_address": "cluster:99999"}, "mgmt_address must look like host:port"),
        ({"job_labels": ["team"]}, "job_labels entries must look like key=value, got 'team'"),
        ({"job_priority": "p4"}, "ClusterConfig.job_priority: must be of type"),
        ({"mount_dirs": ["/no/such/dir"]}, "mount_dirs: directory '/no/such/dir' does not exist"),
        ({"python_paths": ["/no/such/dir"]}, "python_paths: directory '/no/such/dir'"),
        ({"automount": "yes"}, "ClusterConfig.automount: must be of type bool"),
        ({"num_csxx": 2}, "unknown argument 'num_csxx'. Did you mean 'num_csx'?"),
    ],
)
def test_cluster_config_rejects_bad_fields(fields, message):
    with pytest.raises(ConfigError) as info:
        plugtrain.ClusterConfig(**fields)
    assert message in str(info.value)


def test_cluster_config_accepts_every_field(tmp_path):
    config = plugtrain.ClusterConfig(
        mgmt_address="mgmt.example:9000",
        mgmt_namespace="ns",
        credentials_path="/certs/ca.crt",
        num_csx=2,
        max_wgt_servers=4,
        max_act_per_csx=8,
        num_workers_per_csx=3,
        cbcore_image="cbcore:2.10",
        job_labels=["team=ml", "run=1"],
        job_priority="p1",
        job_time_sec=3600,
        mount_dirs=[str(tmp_path)],
        python_paths=[str(tmp_path)],
        automount=False,
        mount_all=False,
        disable_mount_check=False,
        disable_version_check=True,
        workflow_id="wf",
        notifications=[{"mailto": "a@b.c"}],
    )
    assert config.to_dict()["job_labels"] == ["team=ml", "run=1"]
    assert plugtrain.backend("CSX", cluster_config={"num_csx": 3}).cluster_config.num_csx == 3


def test_compile_only_and_validate_only_exclude_each_other():
    with pytest.raises(ConfigError, match="mutually exclusive"):
        plugtrain.backend("CSX", compile_only=True, validate_only=True)


# -- run files -------------------------------------------------------------------------------

TRAINER = """\
  - trainer:
      init:
        {backend}
        model: {{MLP: {{in_features: 64, out_features: 10}}}}
      validate:
        val_dataloader: {{Digits: {{batch_size: 64, split: val}}}}
"""


def _check(tmp_path, capsys, *backends):
    text = "trainer:\n" + "".join(TRAINER.format(backend=b) for b in backends)
    path = tmp_path / "run.yaml"
    path.write_text(text)
    status = plugtrain_main(["check", str(path)])
    return status, capsys.readouterr(), path


def test_check_rejects_the_seed_invalid_csx_then_cpu_file(tmp_path, capsys):
    status, out, path = _check(tmp_path, capsys, 'device: "CSX"', 'device: "CPU"')
    assert status == 2
    assert f"{path}:10:" in out.err
    assert SEED_TEXT in out.err


def test_check_accepts_the_seed_csx_backend_file_and_reports_bad_fields_with_lines(
    tmp_path, capsys
):
    good = "backend: {backend_type: CSX, cluster_config: {num_csx: 4, mount_dirs: [/tmp]}}"
    status, out, _ = _check(tmp_path, capsys, good, good.replace("num_csx: 4", "num_csx: 2"))
    assert status == 0, out.err
    bad = (
        "backend: {backend_type: CSX, cluster_config: "
        "{num_csx: 0, job_labels: [x], mount_dirs: [/no/such/dir]}}"
    )
    status, out, path = _check(tmp_path, capsys, bad)
    assert status == 2
    assert f"{path}:4:" in out.err
    assert "trainer[0].trainer.init.backend.cluster_config.num_csx: must be > 0" in out.err
    bad = "backend: {backend_type: CSX, cluster_config: {job_labels: [x], mount_dirs: [/nope]}}"
    status, out, _ = _check(tmp_path, capsys, bad)
    assert "job_labels entries must look like key=value" in out.err
    assert "mount_dirs: directory '/nope' does not exist" in out.err
    status, out, _ = _check(tmp_path, capsys, "backend: {backend_type: CSX, cluster_conf: {}}")
    assert "unknown argument 'cluster_conf'" in out.err


def test_check_validates_cpu_and_gpu_arguments(tmp_path, capsys):
    status, out, _ = _check(tmp_path, capsys, "backend: {backend_type: CPU, num_processes: 0}")
    assert status == 2
    assert "num_processes: must be > 0" in out.err
    status, out, _ = _check(tmp_path, capsys, "backend: {backend_type: GPU, sync_batchnorm: 1}")
    assert "sync_batchnorm: must be of type bool" in out.err


# -- the CSX hand-off (against a test double of cerebras.pytorch) ----------------------------


class FakeCstorchDouble(types.ModuleType):
    """Test double of ``cerebras.pytorch``: records the backends and compiles it is asked for."""

    def __init__(self) -> None:
        super().__init__("cerebras.pytorch")
        self.backends: list[dict] = []
        self.compiled: list[object] = []
        fake = self

        class ClusterConfig:
            def __init__(self, **fields):
                self.__dict__.update(fields)

        class FakeBackend:
            torch_device = torch.device("cpu")

            def __init__(self, backend_type, **arguments):
                fake.backends.append({"backend_type": backend_type, **arguments})

        self.distributed = types.SimpleNamespace(ClusterConfig=ClusterConfig)
        self.FakeBackend = FakeBackend

    def backend(self, backend_type, **arguments):
        return self.FakeBackend(backend_type, **arguments)

    def compile(self, model, backend):
        self.compiled.append((model, backend))
        return model


@pytest.fixture
def fake_cstorch_double(monkeypatch):
    fake = FakeCstorchDouble()
    monkeypatch.setitem(sys.modules, "cerebras", types.ModuleType("cerebras"))
    monkeypatch.setitem(sys.modules, "cerebras.pytorch", fake)
    return fake


def test_csx_hands_off_to_a_fake_cerebras_pytorch_double(fake_cstorch_double, tmp_path):
    backend = plugtrain.backend(
        "CSX",
        compile_dir="/compiled",
        cluster_config=plugtrain.ClusterConfig(num_csx=4, mount_dirs=[str(tmp_path)]),
    )
    first = Trainer(backend=backend, model=_mlp, model_dir=tmp_path)
    backend.cluster_config.num_csx = 2
    backend.cluster_config.num_workers_per_csx = 1
    Trainer(backend=backend, model=_mlp, model_dir=tmp_path)
    made = fake_cstorch_double.backends
    assert [b["backend_type"] for b in made] == ["CSX", "CSX"]
    assert made[0]["compile_dir"] == "/compiled"
    assert made[0]["compile_only"] is False
    assert made[0]["cluster_config"].num_csx == 4
    assert made[0]["cluster_config"].mount_dirs == [str(tmp_path)]
    assert made[1]["cluster_config"].num_csx == 2
    assert made[1]["cluster_config"].num_workers_per_csx == 1
    assert len(fake_cstorch_double.compiled) == 2
    assert fake_cstorch_double.compiled[0][0] is first.model
    assert first.device == torch.device("cpu")


def test_csx_revalidates_lists_changed_in_place_before_running(fake_cstorch_double, tmp_path):
    backend = plugtrain.backend("CSX")
    backend.cluster_config.mount_dirs.append("/no/such/dir")
    with pytest.raises(ConfigError, match="does not exist"):
        Trainer(backend=backend, model=_mlp, model_dir=tmp_path)
    assert fake_cstorch_double.backends == []


# -- CPU -------------------------------------------------------------------------------------


def test_cpu_with_several_processes_needs_a_launcher_in_python(monkeypatch, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    backend = plugtrain.backend("CPU", num_processes=2)
    with pytest.raises(BackendError, match="torchrun --nproc-per-node 2"):
        Trainer(backend=backend, model=_mlp, model_dir=tmp_path)


def test_cpu_arguments_are_checked_in_python():
    with pytest.raises(ConfigError, match=r"CPU\.num_processes: must be > 0"):
        plugtrain.backend("CPU", num_processes=0)
    with pytest.raises(ConfigError, match=r"CPU\.dist_timeout: must be > 0"):
        plugtrain.backend("CPU", dist_timeout=0)


def test_processes_per_node():
    cpu = plugtrain.resolve("backend", "CPU")
    gpu = plugtrain.resolve("backend", "GPU")
    assert cpu.processes_per_node({}) == 1
    assert cpu.processes_per_node({"num_processes": 3}) == 3
    assert gpu.processes_per_node({}) == 1
    assert gpu.processes_per_node({"enable_distributed": True}) == max(1, torch.cuda.device_count())


# -- GPU -------------------------------------------------------------------------------------


def test_gpu_arguments_are_checked_without_a_gpu():
    backend = plugtrain.backend("GPU", sync_batchnorm=True, main_process_id=0)
    assert backend.sync_batchnorm
    assert backend.dist_backend == "nccl"
    with pytest.raises(ConfigError, match="main_process_id: must be >= 0"):
        plugtrain.backend("GPU", main_process_id=-1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_without_cuda_stops_with_a_clear_error(tmp_path):
    with pytest.raises(BackendError, match="GPU backend: no CUDA device is available"):
        Trainer(device="GPU", model=_mlp, model_dir=tmp_path)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
def test_gpu_fit_places_model_and_batches_on_the_gpu(tmp_path):
    from plugtrain.builtin.data import synthetic_loader

    sgd = plugtrain.resolve("optimizer", "SGD")
    trainer = Trainer(
        device="GPU",
        model=lambda: torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 3)
        ),
        optimizer=lambda model: sgd(model.parameters(), lr=0.1),
        loop={"max_steps": 4},
        model_dir=tmp_path,
        seed=0,
    )
    assert next(trainer.model.parameters()).device.type == "cuda"
    data = synthetic_loader(batch_size=8, num_examples=32, in_features=8, num_classes=3)
    metrics = trainer.fit(data, data)
    assert trainer.global_step == 4
    assert metrics["loss"] == metrics["loss"]


@needs_cuda
def test_gpu_sync_batchnorm_is_left_alone_in_one_process(tmp_path):
    trainer = Trainer(
        backend=plugtrain.backend("GPU", sync_batchnorm=True),
        model=lambda: torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4)),
        model_dir=tmp_path,
    )
    assert isinstance(trainer.model[1], torch.nn.BatchNorm1d)


# -- the YAML of the seed --------------------------------------------------------------------


def test_seed_yaml_device_csx_fit_stops_with_the_clear_error(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            trainer:
              init:
                device: "CSX"
                model_dir: {tmp_path / "model"}
                model: {{MLP: {{in_features: 64, out_features: 10}}}}
                optimizer: {{SGD: {{lr: 0.1}}}}
                loop: {{max_steps: 2}}
              fit:
                train_dataloader: {{Digits: {{batch_size: 8}}}}
            """
        )
    )
    assert plugtrain_main(["fit", str(path)]) == 1
    assert "The CSX backend needs the Cerebras software stack" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()
