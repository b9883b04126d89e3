"""The figures' common setup (soft_spatial/lab/paper/analysis/plotting.py): matplotlib without a
display, and a save that makes the folder, writes a PNG of the figure's size at 130 dpi and closes
the figure (a long analysis opens many)."""
import struct

from soft_spatial.lab.paper.analysis.plotting import pyplot, save


def test_save_writes_the_figure_as_a_png_into_a_new_folder_and_closes_it(tmp_path):
    plt = pyplot()
    assert plt.get_backend().lower() == "agg"
    fig, ax = plt.subplots(figsize=(2.0, 1.5))
    ax.plot([0, 1], [1, 0])
    path = tmp_path / "a" / "b" / "fig.png"
    assert save(fig, str(path)) == path
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (260, 195)  # 2 × 1.5 inches at 130 dpi
    assert fig.number not in plt.get_fignums()
