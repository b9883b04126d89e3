"""Fails loudly when Ray changes what soft_spatial/compat/ray.py relies on."""
import os


def test_ray_internals_we_touch_are_unchanged():
    from soft_spatial.compat.ray import check_internals

    assert check_internals() == []


def test_node_ip_address_is_what_ray_private_services_returned():
    """The public call gives the address the launcher used to read from ray._private."""
    import ipaddress

    from ray._private.services import get_node_ip_address

    from soft_spatial.compat.ray import node_ip_address

    ip = node_ip_address()
    ipaddress.ip_address(ip)  # a valid address
    assert ip == get_node_ip_address()


def test_what_keeping_the_sigterm_handler_across_ray_init_relies_on_is_unchanged():
    """soft_spatial/compat/ray.py: verl's run_ppo calls ``ray.init`` through the module."""
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    from soft_spatial.integration.platform import use_cpu_platform
    from soft_spatial.compat.ray import check_sigterm_seam

    use_cpu_platform()  # before verl's trainer imports
    assert check_sigterm_seam() == []
