"""Interactive views of the engine (ipywidgets + matplotlib).

Each widget runs on the simulator so it answers at slider speed, and also accepts a
Trace recorded from the real model. Every widget is a small class (`base.CourseWidget`)
whose `.widget` is the ipywidgets box (displaying the object shows it), whose controls
are attributes, and whose `.result` holds the numbers it currently shows — so tests can
move a control and check what was recomputed.

What is where: `layout.py` reads a Trace (which slot each request sits in, which KV
block it holds), `draw.py` draws the slot grid and the block map, `style.py` holds the
colours; one widget per file: `slot_waste`, `stepper`, `kv_map`, `chunked`,
`self_check`, `dashboard`, `scoreboard` (lesson 13: whose part runs in the learner's engine).
"""
