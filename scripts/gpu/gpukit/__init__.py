"""The GPU kit's stager and installer, behind ``scripts/gpu/kit.py``: ``recipe`` (what each pack
carries and leaves out), ``wheels`` (a wheel into a trimmed site), ``packs`` (a site into a
reproducible xz pack), ``calls`` (packs into device calls and the manifest), ``staging`` (here:
download, build, write the kit), ``install`` (there, standard library only: check, reassemble,
unpack)."""
