# Sandboxer's code interpreter: extra result formats, as E2B's code interpreter gives them.
#   e2b/data          a pandas DataFrame as {column: [values]} (Timestamps as ISO strings)
#   application/json  a dict or list result as JSON (not only objects with _repr_json_)
# Both cost nothing until the user's code has imported pandas (the DataFrame check looks at
# sys.modules, it never imports pandas itself).
import json as _sbx_json
import sys as _sbx_sys


def _sbx_install_formatters():
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter, JSONFormatter
    from traitlets import ObjectName, Unicode

    class DataFrameFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pd = _sbx_sys.modules.get("pandas")
            if pd is None or not isinstance(obj, pd.DataFrame):
                return super().__call__(obj)
            columns = obj.to_dict(orient="list")
            return {
                str(k): [v.isoformat() if isinstance(v, pd.Timestamp) else v for v in vals]
                for k, vals in columns.items()
            }

    class PlainJSONFormatter(JSONFormatter):
        def __call__(self, obj):
            if isinstance(obj, (dict, list)):
                try:
                    return _sbx_json.loads(_sbx_json.dumps(obj, default=str)), {"expanded": True}
                except (TypeError, ValueError):
                    pass
            return super().__call__(obj)

    shell = get_ipython()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters
    formatters["e2b/data"] = DataFrameFormatter(parent=shell.display_formatter)
    formatters["application/json"] = PlainJSONFormatter(parent=shell.display_formatter)


_sbx_install_formatters()
del _sbx_install_formatters
