from connector_ops import invoke


def test_push_query_on_both_databases(files, env):
    pf = files.add_bytes(b"city,n\nParis,1\nRome,2\n", "c.csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"city": "Rome"}}) == {"result": [{"city": "Rome", "n": "2"}]}
