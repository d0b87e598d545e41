"""Holistic Trace Analysis' idle-time breakdown of each trace given, over the whole trace.

HTA 0.5 drops, by default, the kernels of the last ProfilerStep and those launched outside
ProfilerSteps (Trace._filter_irrelevant_gpu_kernels); gaptop reports the whole trace (or a
--from/--to window), so that filter is turned off here. Counts are those of HTA's interval
statistics (show_idle_interval_stats), totals in µs. Set HTA_DISABLE_NS_ROUNDING=1 to keep HTA
from rounding fractional-µs times to whole µs.

    pip install HolisticTraceAnalysis==0.5.0; python3 hta_reference.py TRACE...
"""
import json
import logging
import os
import shutil
import sys
import tempfile

logging.disable(logging.WARNING)
from hta.common.trace import Trace  # noqa: E402

Trace._filter_irrelevant_gpu_kernels = lambda self, *a, **k: None
from hta.trace_analysis import TraceAnalysis  # noqa: E402

for f in sys.argv[1:]:
    d = tempfile.mkdtemp()
    shutil.copy(f, d)
    ta = TraceAnalysis(trace_dir=d)
    rank = ta.t.get_ranks()[0]
    df, st = ta.get_idle_time_breakdown(
        ranks=[rank], visualize=False, show_idle_interval_stats=True
    )
    out = {}
    for cat in ["host_wait", "kernel_wait", "other"]:
        total = df[df.idle_category == cat].idle_time.sum()
        count = st[st.index == cat]["count"].sum()
        out[cat] = [int(count), round(float(total), 3)]
    print(os.path.basename(f), json.dumps(out))
