"""Your exercises: one module per lesson. Edit the functions marked "Your turn";
grade with `python -m minillm.grading NN` or the check cell at the end of the lesson."""
