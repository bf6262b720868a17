"""Search projections of the recall log: what is indexed, the lexical and vector lanes, fusion.

Each module is one idea: `documents` (what text a record contributes), `embedders`, `vectors`
and `lexical` (the two lanes, each remembering the last seq it applied per stream), `filters`
(the one filter both lanes apply), `fusion` and `conflicts` (pure ranking over lane hits).
"""
