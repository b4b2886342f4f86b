from live_server import new_pipeline, question, question_wav, resources, serve  # noqa: F401  (fixtures)
