"""Drawing helpers of the lessons, one module per lesson (`figures.l01`, `figures.l04`, ...).

A lesson's code cells show one idea each; the matplotlib plumbing behind a picture lives
here, so the cell that draws reads `figures.l01.plot_step_time(results)`. The course's
colours and style come from `minillm.widgets.style`. The notebooks run with `lessons/` as
their working folder, so `import figures` finds this package.
"""
