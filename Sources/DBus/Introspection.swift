/// Introspection XML generated from interface declarations.
public enum Introspection {
    static let header = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">

        """

    /// The standard interfaces every object serves (the connection answers their calls).
    static let standardInterfaces: [DBusInterface] = {
        let unused: DBusMethod.Handler = { _, reply in reply.fail(DBusError.failed("served by the connection")) }
        func method(_ name: String, _ inputs: [String] = [], _ output: DBusArgument? = nil) -> DBusMethod {
            DBusMethod(
                name, inputs: inputs.map { DBusArgument($0, $0 == "value" ? .variant : .string) },
                outputs: output.map { [$0] } ?? [], handler: unused)
        }
        return [
            DBusInterface(
                name: "org.freedesktop.DBus.Peer",
                methods: [method("Ping"), method("GetMachineId", [], DBusArgument("machine_uuid", .string))]),
            DBusInterface(
                name: "org.freedesktop.DBus.Introspectable",
                methods: [method("Introspect", [], DBusArgument("xml_data", .string))]),
            DBusInterface(
                name: "org.freedesktop.DBus.Properties",
                methods: [
                    method("Get", ["interface_name", "property_name"], DBusArgument("value", .variant)),
                    method(
                        "GetAll", ["interface_name"], DBusArgument("props", .dictionary(key: .string, value: .variant))),
                    method("Set", ["interface_name", "property_name", "value"]),
                ],
                signals: [
                    DBusSignal(
                        "PropertiesChanged",
                        arguments: [
                            DBusArgument("interface_name", .string),
                            DBusArgument("changed_properties", .dictionary(key: .string, value: .variant)),
                            DBusArgument("invalidated_properties", .array(.string)),
                        ])
                ]),
        ]
    }()

    static let standard = standardInterfaces.map { xml(for: $0) }.joined()

    /// The full document an object answers `Introspect` with.
    static func object(_ interfaces: [DBusInterface]) -> String {
        header + "<node>\n" + standard + interfaces.map { xml(for: $0) }.joined() + "</node>\n"
    }

    /// A node that only lists children (for the path's ancestors, so tools can walk the tree).
    static func node(children: [String]) -> String {
        header + "<node>\n" + standard + children.map { "  <node name=\"\($0)\"/>\n" }.joined() + "</node>\n"
    }

    /// A document describing only the given interfaces, as installed to `dbus-1/interfaces`.
    public static func document(_ interfaces: [DBusInterface]) -> String {
        header + "<node>\n" + interfaces.map { xml(for: $0) }.joined() + "</node>\n"
    }

    /// The `<interface>` element of one interface, indented for a `<node>`.
    public static func xml(for interface: DBusInterface) -> String {
        var out = "  <interface name=\"\(interface.name)\">\n"
        func documentation(of member: String) -> String {
            guard let text = interface.documentation[member] else { return "" }
            return "      <annotation name=\"org.gtk.GDBus.DocString\" value=\"\(escape(text))\"/>\n"
        }
        for method in interface.methods {
            let arguments =
                method.inputs.map { ($0, "in") } + method.outputs.map { ($0, "out") }
            if arguments.isEmpty, interface.documentation[method.name] == nil {
                out += "    <method name=\"\(method.name)\"/>\n"
                continue
            }
            out += "    <method name=\"\(method.name)\">\n" + documentation(of: method.name)
            for (argument, direction) in arguments {
                out +=
                    "      <arg name=\"\(argument.name)\" type=\"\(escape(argument.type.signature))\" direction=\"\(direction)\"/>\n"
            }
            out += "    </method>\n"
        }
        for property in interface.properties {
            let open =
                "    <property name=\"\(property.name)\" type=\"\(escape(property.type.signature))\" access=\"\(property.access)\""
            if property.changeSignal == .emits, interface.documentation[property.name] == nil {
                out += open + "/>\n"
            } else {
                out += open + ">\n" + documentation(of: property.name)
                if property.changeSignal != .emits {
                    out +=
                        "      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(property.changeSignal.rawValue)\"/>\n"
                }
                out += "    </property>\n"
            }
        }
        for signal in interface.signals {
            if signal.arguments.isEmpty {
                out += "    <signal name=\"\(signal.name)\"/>\n"
                continue
            }
            out += "    <signal name=\"\(signal.name)\">\n"
            for argument in signal.arguments {
                out += "      <arg name=\"\(argument.name)\" type=\"\(escape(argument.type.signature))\"/>\n"
            }
            out += "    </signal>\n"
        }
        return out + "  </interface>\n"
    }

    private static func escape(_ text: String) -> String {
        text.replacing("&", with: "&amp;").replacing("<", with: "&lt;").replacing(">", with: "&gt;")
            .replacing("\"", with: "&quot;")
    }
}
