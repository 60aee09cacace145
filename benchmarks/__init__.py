"""The benchmarks of streamdp: a registry of scenarios with stable ids, one runner, one result format.

    python -m benchmarks list                 # the scenarios, by id and kind
    python -m benchmarks run tally noise      # run scenarios by id; results/<id>.json
    python -m benchmarks run --smoke          # the speed scenarios' small variants against speed/tolerances.json
    python -m benchmarks report               # results/<id>.md (and .png with matplotlib) from the JSON

Speed scenarios (benchmarks/speed/) time our operation and a plain baseline doing the same work without
privacy in the same run and report the ratio, never an absolute time: a ratio survives a shared machine.
Research studies and older scripts (benchmarks/studies/, benchmarks/speed/) are registered as scripts.
"""
