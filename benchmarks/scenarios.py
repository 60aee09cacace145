"""Every registered scenario. Speed scenarios report the ratio of our CPU time to a plain baseline's;
scripts run as they are and write their own result files (``registry.script``: one line each)."""

from __future__ import annotations

from benchmarks.registry import script, speed
from benchmarks.speed import pairs

SMOKE = {"repeat": 7, "min_time": 0.04}
FULL = {"repeat": 9, "min_time": 0.3}

# --- speed: ours / plain baseline, same run ---------------------------------------------------------------
speed("speed.tally", pairs.tally_pair, {"n": 100_000, **FULL}, {"n": 5_000, **SMOKE})
speed("speed.encode", pairs.encode_pair, {"n": 100_000, **FULL}, {"n": 5_000, **SMOKE})
speed("speed.update", pairs.update_pair, {"n": 100_000, **FULL}, {"n": 5_000, **SMOKE})
speed("speed.fit", pairs.fit_pair, {"n": 30_000, **FULL}, {"n": 2_000, **SMOKE})
speed("speed.predict", pairs.predict_pair, {"n": 100_000, **FULL}, {"n": 5_000, **SMOKE})
speed("speed.noise", pairs.noise_pair, {"n": 1_000_000, **FULL}, {"n": 50_000, **SMOKE})
speed("speed.blob", pairs.blob_pair, {"height": 12, **FULL}, {"height": 8, **SMOKE})
speed("speed.river_loop", pairs.river_loop_pair, {"n": 5_000, **FULL}, {"n": 500, **SMOKE})

# --- scripts in benchmarks/speed/ (absolute timings and memory, some need Redis) ----------------------------
S = "benchmarks.speed."
script("bench_dead_letters", S + "bench_dead_letters")
script("hot_path", S + "hot_path")
script("hot_path_h7", S + "hot_path", "--height", "7", what="the hot path on Adult's forest at height 7")
script("idle_schedule", S + "idle_schedule", "--max-lag", "300", "1")
script("model_footprint", S + "model_footprint")
script("bench_cluster", S + "bench_cluster")
script("bench_data_path", S + "bench_data_path")
script("bench_fit", S + "bench_fit")
script("bench_producer_memory", S + "bench_producer_memory")
script("bench_river_loop", S + "bench_river_loop")
script("bench_service", S + "bench_service")
script("bench_tally", S + "bench_tally")
script("bench_worker_memory", S + "bench_worker_memory")
script("bench_units", S + "bench_units", "--records", "1000000", "--ids", "10000000", "--cluster")
script("kernel_cpython_versions", S + "kernel_cpython_versions")
script("kernel_vs_numba", S + "kernel_vs_numba")
script("river_loop_estimate", S + "river_loop_estimate")
script("noise_layout", S + "noise_layout")
script("river_loop_split", S + "river_loop_split")
script("stream_footprint", S + "stream_footprint")
script("worker_memory_floor", S + "worker_memory_floor")
script("worker_memory_phases", S + "worker_memory_phases")

# --- research studies in benchmarks/studies/ ---------------------------------------------------------------
T = "benchmarks.studies."
script("accuracy_small_data", T + "accuracy_small_data")
script("adult_default_height", T + "adult_default_height")
script("budgeted_draw", T + "budgeted_draw")
script("continual_table", T + "continual_table")
script("drift_forgetting", T + "drift_forgetting")
script("drift_forgetting_service", T + "drift_forgetting_service")
script("estimation_posterior", T + "estimation_posterior")
script("river_estimate_pair", T + "river_estimate_pair", "synth-linear,synth-blobs,uci-nursery")
script("service_defaults", T + "service_defaults")
script("stream_over_time", T + "stream_over_time")
script("stream_paths_small", T + "stream_paths_small")
for _name in """accuracy_height accuracy_mushroom_deep accuracy_rdt agrawal_batch agrawal_noise_free continual_counting
default_height dpea_bai dpea_inner_releases dpea_stopped_branches dpl_rf estimation_shallow_leaves
estimation_variants fit_height_ceiling floor_draws fs_c45 fs_id3_hanisch grow_ceiling hanisch_pooled hanisch_prior
auto_numeric_candidates kanon_batch late_worker learner_roots learner_selection n_trees n_trees_low_epsilon numeric_thresholds nursery_ceiling_cv nursery_rule_explore prior_stumps prune_snr
report_accuracy river_ceiling river_eval river_floor river_grid river_grow river_service_eval river_variants
river_window_floor stream_batch_size stream_batch_size_ceiling stream_floor_identifiable stream_height_ceiling
stream_small window_catchup""".split():
    script(_name, T + _name)
