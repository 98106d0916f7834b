"""The TOML cluster file: the documented example, defaults, and key-named errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attentived.topology import (
    Link,
    TopologyParseError,
    load_cluster_file,
    parse_cluster_file,
    uniform,
)

FIXTURES = Path(__file__).parent / "fixtures"


def test_lab_cluster_file() -> None:
    topo = load_cluster_file(FIXTURES / "lab_cluster.toml")
    assert [n.name for n in topo.nodes] == ["dgx01", "dgx02", "node1", "node2", "node3", "node4"]
    assert [n.switch for n in topo.nodes] == ["sw3", "sw3", "sw1", "sw1", "sw2", "sw2"]
    assert topo.switch_parent == {"sw1": "spine", "sw2": "spine", "sw3": "spine", "spine": None}
    assert topo.bandwidths.nvlink == 100.0 and topo.bandwidths.spine == 5.0
    assert topo.bandwidths.network == 12.5  # not given: the default
    dgx, node1, node3 = topo.nodes[0], topo.nodes[2], topo.nodes[4]
    assert dgx.nvlink_bw is not None
    assert dgx.nvlink_bw[3][2] == 50.0 and dgx.islands == (tuple(range(8)),)
    assert node1.links == node3.links == uniform(1, 8).nodes[0].links
    assert topo.link(topo.gpu_id("node1", 0), topo.gpu_id("node3", 0)) == Link.SPINE


def test_minimal_file_and_defaults() -> None:
    topo = parse_cluster_file('[[nodes]]\nnames = "a[1-2]"\ngpus = 4\n')
    assert [(n.name, n.switch, n.islands) for n in topo.nodes] == [
        ("a1", "sw0", ((0, 1, 2, 3),)),
        ("a2", "sw0", ((0, 1, 2, 3),)),
    ]
    assert topo.switch_parent == {"sw0": None}


def test_islands_without_gpus_and_sockets_default_to_islands() -> None:
    topo = parse_cluster_file('[[nodes]]\nnames = "b1"\nislands = [[0, 1], [2, 3]]\n')
    node = topo.nodes[0]
    assert node.num_gpus == 4
    assert node.links[0] == (Link.SELF, Link.NVLINK, Link.SOCKET, Link.SOCKET)


def test_explicit_sockets_make_cross_island_pairs_pcie_host() -> None:
    text = '[[nodes]]\nnames = "b1"\ngpus = 4\nislands = [[0], [1], [2], [3]]\nsockets = [[0, 1, 2, 3]]\n'
    node = parse_cluster_file(text).nodes[0]
    assert node.links[0] == (Link.SELF, Link.PCIE_HOST, Link.PCIE_HOST, Link.PCIE_HOST)


def test_nodes_are_in_natural_order_across_tables() -> None:
    text = '[[nodes]]\nnames = "n10"\ngpus = 1\n[[nodes]]\nnames = "n[2,9]"\ngpus = 2\n'
    assert [n.name for n in parse_cluster_file(text).nodes] == ["n2", "n9", "n10"]


def test_nvidia_smi_path_is_relative_to_the_toml_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "box.txt").write_text("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\t X \n")
    (tmp_path / "c.toml").write_text(
        '[[nodes]]\nnames = "x1"\nnvidia_smi_topo = "sub/box.txt"\nnvlink_gbps_per_link = 50\n'
    )
    node = load_cluster_file(tmp_path / "c.toml").nodes[0]
    assert node.nvlink_bw is not None
    assert node.nvlink_bw[0][1] == 100.0


def test_nvidia_smi_errors_name_the_topo_file(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_text("\tGPU0\tGPU1\nGPU0\t X \tQQ\nGPU1\tNV2\t X \n")
    (tmp_path / "c.toml").write_text('[[nodes]]\nnames = "x1"\nnvidia_smi_topo = "bad.txt"\n')
    with pytest.raises(TopologyParseError, match=r"bad.txt:2: unknown link 'QQ' between GPU0 and GPU1"):
        load_cluster_file(tmp_path / "c.toml")


def test_unreadable_cluster_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyParseError, match=r"missing.toml: cannot read the cluster file"):
        load_cluster_file(tmp_path / "missing.toml")


_A = '[[nodes]]\nnames = "a[1-2]"\ngpus = 8\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes = [", r"^cluster.toml: not valid TOML: "),
        ("", r"^cluster.toml: nodes: at least one \[\[nodes\]\] table is required"),
        ("nodes = 3", r"^cluster.toml: nodes: at least one"),
        ("nodes = [1]", r"^cluster.toml: nodes\[0\]: must be a table, got 1"),
        (_A + "colour = 1", r"^cluster.toml: nodes\[0\].colour: unknown key; expected one of names, switch"),
        (_A + "[other]", r"^cluster.toml: other: unknown key; expected one of bandwidths, nodes, switches"),
        (
            _A + "[bandwidths]\nnvlnk = 1",
            r"^cluster.toml: bandwidths.nvlnk: unknown key; expected one of nvlink, pcie_switch",
        ),
        (_A + "[bandwidths]\nnvlink = 0", r"^cluster.toml: bandwidths.nvlink: must be a positive number"),
        (_A + "[bandwidths]\nnvlink = inf", r"^cluster.toml: bandwidths.nvlink: must be a positive number"),
        (_A + "[bandwidths]\nnvlink = true", r"^cluster.toml: bandwidths.nvlink: must be a positive number"),
        ("bandwidths = 3\n" + _A, r"^cluster.toml: bandwidths: must be a table"),
        ('[[nodes]]\ngpus = 8', r"^cluster.toml: nodes\[0\].names: missing"),
        ('[[nodes]]\nnames = ""\ngpus = 8', r"^cluster.toml: nodes\[0\].names: must be a non-empty string"),
        ('[[nodes]]\nnames = "a[2-1]"\ngpus = 8', r"^cluster.toml: nodes\[0\].names: .*reversed range"),
        (_A + '[[nodes]]\nnames = "a2"\ngpus = 8', r"^cluster.toml: nodes\[1\].names: a2 is already in nodes\[0\]"),
        ('[[nodes]]\nnames = "a"', r"^cluster.toml: nodes\[0\].gpus: missing; give gpus, islands or nvidia_smi_topo"),
        ('[[nodes]]\nnames = "a"\ngpus = 0', r"^cluster.toml: nodes\[0\].gpus: must be a whole number from 1 to 1024"),
        ('[[nodes]]\nnames = "a"\ngpus = 8.0', r"^cluster.toml: nodes\[0\].gpus: must be a whole number"),
        ('[[nodes]]\nnames = "a"\ngpus = true', r"^cluster.toml: nodes\[0\].gpus: must be a whole number"),
        (
            '[[nodes]]\nnames = "a"\ngpus = 4\nislands = [[0,1],[1,2,3]]',
            r"^cluster.toml: nodes\[0\].islands: GPU 1 appears twice",
        ),
        (
            '[[nodes]]\nnames = "a"\ngpus = 4\nislands = [[0,1],[2]]',
            r"^cluster.toml: nodes\[0\].islands: GPU 3 is in no group",
        ),
        (
            '[[nodes]]\nnames = "a"\ngpus = 2\nislands = [[0,1,2]]',
            r"^cluster.toml: nodes\[0\].islands: GPU 2 is out of range: the node has GPUs 0..1",
        ),
        ('[[nodes]]\nnames = "a"\nislands = [[1,2]]', r"^cluster.toml: nodes\[0\].islands: GPU 2 is out of range"),
        ('[[nodes]]\nnames = "a"\nislands = []', r"^cluster.toml: nodes\[0\].islands: needs at least one group"),
        (
            '[[nodes]]\nnames = "a"\nislands = [[]]',
            r"^cluster.toml: nodes\[0\].islands: group 0 must be a non-empty array",
        ),
        ('[[nodes]]\nnames = "a"\nislands = [[0, true]]', r"^cluster.toml: nodes\[0\].islands: group 0 must be"),
        ('[[nodes]]\nnames = "a"\nislands = "0-3"', r"^cluster.toml: nodes\[0\].islands: must be an array"),
        (
            '[[nodes]]\nnames = "a"\ngpus = 4\nsockets = [[0,1,2]]',
            r"^cluster.toml: nodes\[0\].sockets: GPU 3 is in no group",
        ),
        (
            '[[nodes]]\nnames = "a"\nnvidia_smi_topo = "x.txt"\ngpus = 2',
            r"^cluster.toml: nodes\[0\].gpus: give either nvidia_smi_topo or gpus/islands/sockets",
        ),
        (
            '[[nodes]]\nnames = "a"\ngpus = 2\nnvlink_gbps_per_link = 25',
            r"^cluster.toml: nodes\[0\].nvlink_gbps_per_link: only applies with nvidia_smi_topo",
        ),
        (
            '[[nodes]]\nnames = "a"\nnvidia_smi_topo = "nope.txt"',
            r"^cluster.toml: nodes\[0\].nvidia_smi_topo: cannot read .*nope.txt",
        ),
        (
            '[[nodes]]\nnames = "a"\nnvidia_smi_topo = "x"\nnvlink_gbps_per_link = -1',
            r"^cluster.toml: nodes\[0\].nvlink_gbps_per_link: must be a positive",
        ),
        (_A + 'switch = 3', r"^cluster.toml: nodes\[0\].switch: must be a non-empty string, got 3"),
        (_A + '[switches]\nsw0 = "sw0"', r"^cluster.toml: switches.sw0: a switch cannot be its own parent"),
        (_A + '[switches]\nsw0 = "a"\na = "sw0"', r"^cluster.toml: switches.sw0: loop: sw0 is its own ancestor"),
        (_A + '[switches]\nsw0 = 1', r"^cluster.toml: switches.sw0: must be a non-empty string"),
        ('switches = 1\n' + _A, r"^cluster.toml: switches: must be a table"),
    ],
)
def test_errors_name_file_and_key(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_cluster_file(text, base_dir=tmp_path)


def test_brief_example_message() -> None:
    text = _A + '[[nodes]]\nnames = "b1"\ngpus = 4\nislands = [[0,1,2,3],[3]]\n'
    with pytest.raises(TopologyParseError) as info:
        parse_cluster_file(text)
    assert str(info.value) == "cluster.toml: nodes[1].islands: GPU 3 appears twice"
    assert info.value.key == "nodes[1].islands"


def test_cpus_memory_gpu_type_and_features() -> None:
    text = (
        '[[nodes]]\nnames = "a[1-2]"\ngpus = 8\ncpus = 128\nmem_mb = 1024000\ngpu_type = "h100"\n'
        'features = ["ib", "nvme", "ib"]\n'
        '[[nodes]]\nnames = "b1"\ngpus = 4\nfeatures = "ib, rack2"\n'
        '[[nodes]]\nnames = "c1"\ngpus = 2\n'
    )
    topo = parse_cluster_file(text)
    a1, a2, b1, c1 = topo.nodes
    assert (a1.cpus, a1.mem_mb, a1.gpu_type, a1.features) == (128, 1024000, "h100", ("ib", "nvme"))
    assert (a2.cpus, a2.mem_mb, a2.gpu_type, a2.features) == (a1.cpus, a1.mem_mb, a1.gpu_type, a1.features)
    assert (b1.cpus, b1.mem_mb, b1.gpu_type, b1.features) == (0, 0, "", ("ib", "rack2"))
    assert (c1.cpus, c1.mem_mb, c1.gpu_type, c1.features) == (0, 0, "", ())
    assert topo.declares_resources
    assert not parse_cluster_file(_A).declares_resources


def test_resources_apply_to_nvidia_smi_nodes_too(tmp_path: Path) -> None:
    (tmp_path / "dgx.txt").write_text((FIXTURES / "dgx1_cube_mesh_older.txt").read_text())
    text = '[[nodes]]\nnames = "dgx1"\nnvidia_smi_topo = "dgx.txt"\ncpus = 80\ngpu_type = "v100"\n'
    node = parse_cluster_file(text, base_dir=tmp_path).nodes[0]
    assert (node.num_gpus, node.cpus, node.gpu_type) == (8, 80, "v100")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("cpus = 0", r"nodes\[0\].cpus: must be a whole number of at least 1, got 0"),
        ("cpus = 8.5", r"nodes\[0\].cpus: must be a whole number of at least 1, got 8.5"),
        ("cpus = true", r"nodes\[0\].cpus: must be a whole number"),
        ('mem_mb = "512G"', r"nodes\[0\].mem_mb: must be a whole number of at least 1, got '512G'"),
        ("mem_mb = -1", r"nodes\[0\].mem_mb: must be a whole number"),
        ('gpu_type = ""', r"nodes\[0\].gpu_type: must be a name without spaces"),
        ('gpu_type = "gpu:a100"', r"nodes\[0\].gpu_type: must be a name without spaces"),
        ("gpu_type = 3", r"nodes\[0\].gpu_type: must be a name"),
        ('features = ["ib&nvme"]', r"nodes\[0\].features: must be a name without spaces, commas or any of &"),
        ('features = "ib,,nvme"', r"nodes\[0\].features: must be a name"),
        ("features = 3", r"nodes\[0\].features: must be an array of names or a comma-separated string, got 3"),
        ("features = [1]", r"nodes\[0\].features: must be a name"),
    ],
)
def test_resource_errors_name_file_and_key(line: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=r"^site.toml: " + message):
        parse_cluster_file(_A + line, source="site.toml")


_NODES = '[[nodes]]\nnames = "n[1-4]"\ngpus = 4\n'


def test_blocks_are_slurms_block_topology() -> None:
    topo = parse_cluster_file('block_sizes = [2, 4]\n' + _NODES + '[[blocks]]\nname = "b1"\nnodes = "n[1-2]"\n'
                              '[[blocks]]\nname = "b2"\nnodes = "n[3-4]"\n')
    assert topo.blocks is not None and (topo.blocks.names, topo.blocks.base_nodes, topo.blocks.levels) == (("b1", "b2"), 2, (0, 1))
    assert topo.node_block.tolist() == [0, 0, 1, 1]
    assert parse_cluster_file(_NODES).blocks is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("block_sizes = [2]\n" + _NODES, r"block_sizes: block_sizes without \[\[blocks\]\] tables"),
        ("blocks = 3\n" + _NODES, r"blocks: must be \[\[blocks\]\] tables"),
        (_NODES + '[[blocks]]\nname = "b1"\n', r"blocks\[0\].nodes: must be a non-empty string"),
        (_NODES + '[[blocks]]\nname = "b1"\nnodes = "n9"\n', r"blocks\[0\].nodes: n9 is not a node of this file"),
        (_NODES + '[[blocks]]\nname = "b1"\nnodes = "n[1-2]"\n[[blocks]]\nname = "b2"\nnodes = "n2"\n',
         r"blocks\[1\].nodes: n2 is already in block b1"),
        (_NODES + '[[blocks]]\nname = "b1"\nnodes = "n1"\nswitch = "x"\n', r"blocks\[0\].switch: unknown key"),
        (_NODES + '[[blocks]]\nname = "b1"\nnodes = "n1"\n[[blocks]]\nname = "b1"\nnodes = "n2"\n',
         r"blocks: block b1 is defined twice"),
        ("block_sizes = [2, 3]\n" + _NODES + '[[blocks]]\nname = "b1"\nnodes = "n[1-2]"\n',
         r"block_sizes: BlockSizes value 3"),
        ('block_sizes = ["2"]\n' + _NODES + '[[blocks]]\nname = "b1"\nnodes = "n[1-2]"\n',
         r"block_sizes: must be an array of whole numbers"),
    ],
)
def test_block_errors_name_file_and_key(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=r"^site.toml: " + message):
        parse_cluster_file(text, source="site.toml")


_LINES = [
    "[[nodes]]", 'names = "n[1-2]"', 'names = "n1"', 'names = "n[2-1]"', "names = 5", "gpus = 8", "gpus = 0",
    "gpus = 2", 'gpus = "8"', "islands = [[0,1],[2,3]]", "islands = [[0,1],[1]]", "islands = [[0]]",
    "islands = 3", "sockets = [[0,1,2,3]]", "sockets = [[true]]", 'switch = "sw1"', "switch = []",
    'nvidia_smi_topo = "missing.txt"', "nvlink_gbps_per_link = 25", "[bandwidths]", "nvlink = 0",
    "nvlink = 150.0", "spine = nan", "[switches]", 'sw1 = "spine"', 'spine = "sw1"', "bogus = 1", "[", "=",
    "cpus = 64", "cpus = 0", 'mem_mb = 512000', 'gpu_type = "a100"', 'gpu_type = "a b"', 'features = ["ib"]',
    'features = "ib,x"', "features = [[]]", "[[blocks]]", 'name = "b1"', 'nodes = "n[1-2]"', "block_sizes = [2]",
    "block_sizes = [1, 2]",
]


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=150), st.lists(st.sampled_from(_LINES), max_size=25).map("\n".join)))
def test_arbitrary_text_parses_or_raises_parse_error(text: str) -> None:
    try:
        topo = parse_cluster_file(text, base_dir="/nonexistent")
    except TopologyParseError:
        return
    assert topo.num_gpus >= 1
