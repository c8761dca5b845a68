"""`aft-bench view`: a read-only web app over one results directory (runs, matched pairs, traces as timelines,
the experiment's manifest and analysis, and any scorecards of real MCP servers in its `scorecards/`), served on 127.0.0.1 or written as a static bundle. It reads results and
runs nothing; it never writes into the results directory. `atlas_page` renders an atlas folder's page, which
`aft-bench atlas` writes into that folder.

May import: aft_bench.common, aft_bench.runtime, aft_bench.tasks, aft_bench.judge, aft_bench.episode,
aft_bench.experiment, aft_bench.scorecard, aft_bench.analysis.
"""
