"""Parallel Decoding Lab: the Streamlit entry point.

    streamlit run app.py

This file is the frame around every page: page config, the shared sidebar (prompt, method,
parameters, model, Run / Stop), and a run started from the sidebar, streamed at the top of the
page. The pages (app_pages/*.py) only read the stored traces and draw them with viz/.
"""

import streamlit as st

from app_pages.common import assets, keys, runs, session, sidebar

# the favicon is a local file: a material icon here would be fetched from fonts.gstatic.com
st.set_page_config(page_title="Parallel Decoding Lab", page_icon=str(assets.ASSETS / "favicon.png"), layout="wide")
session.init_state()

nav = st.navigation([
    # Jacobi is the page at /; /jacobi shows it too (a default page is served at / only)
    st.Page("app_pages/jacobi.py", title="Jacobi", icon=":material/view_week:", default=True, url_path="jacobi_home"),
    st.Page("app_pages/jacobi.py", title="Jacobi", icon=":material/view_week:", url_path="jacobi", visibility="hidden"),
    st.Page("app_pages/lookahead.py", title="Lookahead", icon=":material/grid_on:"),
    st.Page("app_pages/recycling.py", title="Token Recycling", icon=":material/recycling:"),
    st.Page("app_pages/suffix.py", title="Suffix drafting", icon=":material/account_tree:"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("app_pages/cllm.py", title="CLLM", icon=":material/bolt:"),
    st.Page("app_pages/explain.py", title="Explain", icon=":material/insights:"),
    st.Page("app_pages/benchmarks.py", title="Benchmarks", icon=":material/table_chart:"),
    st.Page("app_pages/lecture.py", title="Lecture", icon=":material/school:"),
    st.Page("app_pages/traces.py", title="Traces", icon=":material/save:"),
])
if sidebar.sidebar():
    runs.run_methods([keys.selected_method()])
nav.run()
