"""The built-in domains and eval-only suites, one file each, named after the name a config
uses for it (`sampler.domains: [code, math]` -> domains/code.py, domains/math.py; the
registry, environments/registry.py, maps one to the other). They live in a package so that
`code.py` and `math.py` never shadow the standard library's modules: only a script run from
inside this directory would see them first, and none is."""
