"""The local registry for pull tests serves the test images built by tests/images/build.py."""
import os
import platform

import pytest

import registry

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


@pytest.fixture(scope="module")
def reg():
    r = registry.start_registry()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture(scope="module")
def pushed(reg):
    return registry.push_test_images(reg, ["hello-world", "busybox"])


def test_pushed_images_are_served_for_this_platform(reg, pushed):
    assert set(pushed) == {"hello-world", "busybox"}
    for name, ref in pushed.items():
        assert ref == f"{reg.host}/library/{name}:latest"
        info = registry.inspect(reg, ref)
        assert info["Os"] == "linux" and info["Architecture"] == ARCH, info
        assert len(info["Layers"]) == 1, info


def test_pushed_configs_name_their_commands(reg, pushed):
    hello = registry.inspect(reg, pushed["hello-world"], config=True)
    assert hello["config"]["Cmd"] == ["/hello"]
    assert len(hello["rootfs"]["diff_ids"]) == 1 and hello["history"]
    busybox = registry.inspect(reg, pushed["busybox"], config=True)
    assert busybox["config"]["Cmd"] == ["sh"]
    assert any(e.startswith("PATH=") for e in busybox["config"]["Env"])


def test_pushing_again_is_idempotent(reg, pushed):
    digest = registry.inspect(reg, pushed["busybox"])["Digest"]
    registry.push_test_images(reg, ["busybox"])
    assert registry.inspect(reg, pushed["busybox"])["Digest"] == digest


def test_unknown_image_is_not_served(reg):
    with pytest.raises(LookupError, match="manifest unknown"):
        registry.inspect(reg, reg.ref("no-such-image"))


def test_stop_ends_the_registry_and_removes_its_storage():
    r = registry.start_registry()
    assert r.alive()
    r.stop()
    assert not r.alive()
    assert not os.path.exists(r.workdir)
