"""Interactive views of the engine (ipywidgets + matplotlib).

Each widget runs on the simulator so it answers at slider speed, and also accepts a
Trace recorded from the real model. Every widget is a small class whose `.widget` is
the ipywidgets box (displaying the object shows it), whose controls are attributes,
and whose `.result` holds the numbers it currently shows — so tests can move a control
and check what was recomputed.
"""
