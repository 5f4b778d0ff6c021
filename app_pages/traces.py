"""Traces page: download the current traces as JSON, upload one to show it on every page."""

import streamlit as st

from decoding.trace import Trace
from app_pages.common import ui
from viz.style import METHOD_NAMES

st.title("Traces")
ss = st.session_state
st.markdown("A trace is everything a run recorded (tokens, steps, each method's per-step record) as versioned "
            "JSON. Every page works the same on a live run and on a loaded trace.")
res = ui.results()
if res.traces:  # the latest first
    m = ui.pick_trace("Trace", [k for k in reversed(res.order) if k in res.traces], key="trace_pick")
    t = res.traces[m]
    ui.caption(t, res.sources.get(m, ""))
    st.download_button("Download JSON", data=t.to_json(), file_name=f"trace_{m}.json", mime="application/json",
                       key="trace_download")

st.subheader("Upload a trace")
up = st.file_uploader(f"Trace JSON (at most {ui.UPLOAD_CAP_MB} MB)", type=["json"], key="trace_upload",
                      max_upload_size=ui.UPLOAD_CAP_MB)
if up is not None and ss.get("uploaded_id") != up.file_id:
    data = up.getvalue()
    if len(data) > ui.UPLOAD_CAP_MB * 1024 * 1024:
        st.error(f"{ui.md(up.name)} is {len(data) / 2**20:.1f} MB; traces up to {ui.UPLOAD_CAP_MB} MB are accepted.")
    else:
        try:
            t = Trace.from_json(data)
        except Exception as e:  # noqa: BLE001 - any malformed file gets a message, not a traceback
            st.error(f"{ui.md(up.name)} is not a valid trace: {ui.md(str(e))}")
        else:
            ui.put_trace(t, f"uploaded file {up.name}")
            ss.uploaded_id = up.file_id
            pages = ui.pages_showing(t.method)
            st.success(f"Loaded {ui.md(up.name)}: a {METHOD_NAMES[t.method]} trace with {len(t.output_ids)} tokens. "
                       f"{pages} now show{'s' if pages.endswith('page') else ''} it.")
