"""Running the experiments on the cluster: the Ray connection (``cluster``), the long-lived workers
(``pool``), the scheduling policy over plain data (``policy``, no Ray) and the loop joining them
(``runner``). Nothing here imports the report package."""
