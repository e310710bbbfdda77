"""The container runners' own pieces: podman arguments as a kubelet would give them, and mount
targets resolved inside the image when it is entered with chroot."""

from __future__ import annotations

from pathlib import Path

from tests.world.containers.engine import BindMount, ContainerRun, Podman, _in_root


def test_symbolic_links_resolve_inside_the_image_never_on_the_host(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # as Debian's /var/run
    (root / "data").symlink_to("srv/data")  # relative
    assert _in_root(root, "/var/run/gpu-admission/certs") == root / "run/gpu-admission/certs"
    assert _in_root(root, "/data/x") == root / "srv/data/x"
    assert _in_root(root, "/../../etc") == root / "etc"


def test_podman_gets_the_pod_specs_user_groups_mounts_and_read_only_root(tmp_path: Path) -> None:
    run = ContainerRun(
        "gpu-admission:0.1.0",
        command=["gpu-admission", "load"],
        args=["--source", "s3://b"],
        env={"A": "1"},
        user=65532,
        group=65532,
        supplemental_groups=[65532],
        read_only_root=True,
        mounts=[BindMount(tmp_path, "/data"), BindMount(tmp_path, "/etc/x", read_only=True)],
        name="n",
    )
    argv = Podman().argv(run)
    assert argv[argv.index("--user") + 1] == "65532:65532"
    assert argv[argv.index("--group-add") + 1] == "65532"
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert f"type=bind,source={tmp_path},destination=/etc/x,ro=true" in argv
    assert argv[argv.index("--entrypoint") + 1] == '["gpu-admission", "load"]'
    assert argv[-3:] == ["gpu-admission:0.1.0", "--source", "s3://b"]
