"""The toolkit on a real GPU: load a compiled kernel, time it, check it, record it, run a notebook."""
import json

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_build_load_run_and_recompile(tmp_path, monkeypatch):
    import cupy

    import utils.build as b
    monkeypatch.setattr(b, "KERNELS", tmp_path)
    monkeypatch.setattr(b, "REPO", tmp_path)
    k = tmp_path / "scale.cu"
    k.write_text('extern "C" __global__ void scale(const float* x, float* y, int n) '
                 '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.f * x[i]; }\n')
    src = b.KernelSource("scale.cu")
    n = 1000 + 37
    x = cupy.random.RandomState(1037).standard_normal(n, dtype=cupy.float32)   # seeded: 1037
    y = cupy.full(n, np.nan, dtype=cupy.float32)
    src.function("scale")(((n + 255) // 256,), (256,), (x, y, np.int32(n)))
    from utils.check import assert_close
    assert_close(y, 2 * x)
    k.write_text(k.read_text().replace("2.f", "3.f"))
    src.function("scale")(((n + 255) // 256,), (256,), (x, y, np.int32(n)))
    assert_close(y, 3 * x)


def test_bench_copy_ceiling_and_record(tmp_path):
    from utils.hardware import measure_copy
    from utils.record import Record
    rec = Record("00-smoke", gpu="test", root=tmp_path)
    e = measure_copy(rec, nbytes=256 << 20)
    assert 100 < e["metric"] < 20000, e          # GB/s, read + write
    assert e["p10_ms"] <= e["ms"] <= e["p90_ms"]
    assert json.loads((tmp_path / "test" / "00-smoke.json").read_text())["entries"][0]["impl"] == "ceiling.copy"


def test_runner_executes_and_stamps_a_notebook(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="the Jupyter stack (make gpu-install) is missing")
    pytest.importorskip("nbclient", reason="the Jupyter stack (make gpu-install) is missing")
    from utils.run import execute
    from utils.stamp import STAMP_KEY
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import utils\nrec = utils.setup_notebook('00-smoke')"),
                nbformat.v4.new_code_cell("import cupy\nprint(int(cupy.arange(10).sum()))")]
    p = tmp_path / "smoke.ipynb"
    nbformat.write(nb, p)
    ok, wall, err = execute(p)
    assert ok, err
    out = nbformat.read(p, as_version=4)
    assert "H" in out.metadata[STAMP_KEY]["gpu"] or out.metadata[STAMP_KEY]["gpu"]
    assert out.cells[1].outputs[0]["text"].strip() == "45"
